//! The `name(key=value,...)` syntax every registry uses on the command line (policies, prefetchers, workload
//! generators, file layouts): one parser, so that all of them accept and refuse the same texts. Each registry
//! checks the name and the keys and turns [`SpecSyntaxError`] into its own error, naming itself.

use serde_json::Value;

/// A spec split into its name and its `key=value` pairs, in order. Keys are trimmed and `-` becomes `_`;
/// values are trimmed raw text (see [`json_value`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecText<'a> {
    pub name: &'a str,
    /// The text between the parentheses ("" without them).
    pub params_text: &'a str,
    pub params: Vec<(String, &'a str)>,
}

/// What is wrong with a spec's syntax.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecSyntaxError {
    #[error("expected name(key=value,...) with a closing ')'")]
    NoClosingParen,
    /// A parameter without `=`; holds it.
    #[error("expected key=value, found '{0}'")]
    NotKeyValue(String),
}

/// Splits `name` or `name(key=value,...)` (surrounding blanks ignored; empty items skipped).
pub fn split_spec(s: &str) -> Result<SpecText<'_>, SpecSyntaxError> {
    let s = s.trim();
    let (name, params_text) = match s.find('(') {
        Some(i) if s.ends_with(')') => (s[..i].trim(), &s[i + 1..s.len() - 1]),
        Some(_) => return Err(SpecSyntaxError::NoClosingParen),
        None => (s, ""),
    };
    let mut params = Vec::new();
    for kv in params_text.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        let (k, v) = kv.split_once('=').ok_or_else(|| SpecSyntaxError::NotKeyValue(kv.to_string()))?;
        params.push((k.trim().replace('-', "_"), v.trim()));
    }
    Ok(SpecText { name, params_text, params })
}

/// A parameter value: a JSON scalar (`8`, `0.25`, `true`, `"x"`), or else the bare word as a string.
pub fn json_value(v: &str) -> Value {
    serde_json::from_str::<Value>(v).unwrap_or_else(|_| Value::String(v.to_string()))
}

/// Splits a comma-separated list of specs, keeping commas inside parentheses: `lru,lru-k(k=3,crp=5),arc`.
/// Items are trimmed; empty ones are skipped.
pub fn split_list(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(s[start..].trim());
    out.retain(|x| !x.is_empty());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_names_and_parameters() {
        let t = split_spec(" lru-k( k = 3, crp-x=20 ,) ").unwrap();
        assert_eq!(t.name, "lru-k");
        assert_eq!(t.params, vec![("k".to_string(), "3"), ("crp_x".to_string(), "20")]);
        assert_eq!(split_spec("arc").unwrap().params, vec![]);
        assert_eq!(split_spec("arc(k=1"), Err(SpecSyntaxError::NoClosingParen));
        assert_eq!(split_spec("arc(k)"), Err(SpecSyntaxError::NotKeyValue("k".into())));
        assert_eq!(json_value("0.5"), serde_json::json!(0.5));
        assert_eq!(json_value("zipf"), serde_json::json!("zipf"));
        assert_eq!(json_value("true"), serde_json::json!(true));
        assert_eq!(split_list("a, b(x=1,y=2),c"), ["a", "b(x=1,y=2)", "c"]);
        assert!(split_list(" ,").is_empty());
    }
}
