//! What every registry of things named on the command line shares (policies, prefetchers, workload generators,
//! file layouts):
//!
//! - the `name(key=value,...)` syntax: one parser ([`split_spec`], [`split_list`]), so that all of them accept
//!   and refuse the same texts; each registry checks the keys and turns [`SpecSyntaxError`] into its own error,
//!   naming itself;
//! - the names: a [`Registry`] holds each kind's canonical name, other accepted spellings and one-line summary,
//!   finds a kind by any of them under one rule ([`normalize_name`]: case, blanks around, `-` and `_` ignored)
//!   and refuses others with one error ([`UnknownName`]: "unknown policy 'x' (known: ...)"). The
//!   [`crate::spec_registry!`] macro declares a registry's enum of kinds with its table; the typed parts
//!   (configurations, defaults, construction) stay with each registry.

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
    let mut out = split_items(s);
    out.retain(|x| !x.is_empty());
    out
}

/// The items of a comma-separated list at the top level (outside parentheses), trimmed, empty ones kept (so that
/// a caller can name an empty item's place).
pub fn split_items(s: &str) -> Vec<&str> {
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
    out
}

/// One kind of a [`Registry`]: its canonical name (as on the command line, in reports and listings), other
/// accepted spellings and a line for `--help` and docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<K: 'static> {
    pub kind: K,
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub summary: &'static str,
}

/// The names of one registry's kinds, in listing order. Declared with [`crate::spec_registry!`], which also
/// gives the kinds' enum `name`, `aliases`, `summary` and `from_name` methods reading it.
#[derive(Clone, Copy, Debug)]
pub struct Registry<K: 'static> {
    what: &'static str,
    entries: &'static [Entry<K>],
}

/// A name no entry of a registry answers to.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} '{name}' (known: {known})")]
pub struct UnknownName {
    /// What the registry names ("policy", "prefetcher", "workload", "layout").
    pub what: &'static str,
    /// The name as given (blanks around it removed).
    pub name: String,
    /// The canonical names, comma separated.
    pub known: String,
}

/// The form names are compared in: blanks around removed, lower case, without `-` and `_` (`LRU-K`, `lru_k`
/// and `lruk` are one name).
pub fn normalize_name(s: &str) -> String {
    s.trim().chars().filter(|c| *c != '-' && *c != '_').flat_map(char::to_lowercase).collect()
}

impl<K: Copy + PartialEq + 'static> Registry<K> {
    /// A registry of `what` (singular: "policy") with `entries` in listing order.
    pub const fn new(what: &'static str, entries: &'static [Entry<K>]) -> Self {
        Registry { what, entries }
    }

    /// What the registry names, as its errors say it.
    pub fn what(&self) -> &'static str {
        self.what
    }

    /// Every entry, in listing order (for `--help`, `blockwell list` and docs).
    pub fn list(&self) -> &'static [Entry<K>] {
        self.entries
    }

    /// The entry of `kind`.
    pub fn get(&self, kind: K) -> Option<&'static Entry<K>> {
        self.entries.iter().find(|e| e.kind == kind)
    }

    /// The canonical names, comma separated (as errors list them).
    pub fn known(&self) -> String {
        self.entries.iter().map(|e| e.name).collect::<Vec<_>>().join(", ")
    }

    /// The kind `s` names, by canonical name or alias, compared by [`normalize_name`].
    pub fn from_name(&self, s: &str) -> Result<K, UnknownName> {
        let n = normalize_name(s);
        self.entries
            .iter()
            .find(|e| std::iter::once(&e.name).chain(e.aliases).any(|a| normalize_name(a) == n))
            .map(|e| e.kind)
            .ok_or_else(|| UnknownName { what: self.what, name: s.trim().to_string(), known: self.known() })
    }

    /// Checks that every kind has one entry and every name and alias finds its own entry (no two entries share
    /// a spelling); `Err` names the first that does not.
    pub fn validate(&self, all: &[K]) -> Result<(), String> {
        if all.len() != self.entries.len() || all.iter().any(|&k| self.get(k).is_none()) {
            return Err(format!("{} registry: {} kinds, {} entries", self.what, all.len(), self.entries.len()));
        }
        for e in self.entries {
            for s in std::iter::once(&e.name).chain(e.aliases) {
                if self.from_name(s).ok() != Some(e.kind) {
                    return Err(format!("{} registry: '{s}' does not find '{}'", self.what, e.name));
                }
            }
        }
        Ok(())
    }
}

/// Declares a registry's enum of kinds and its [`Registry`] (`REGISTRY`), with `ALL` (every kind in listing
/// order) and the methods `name`, `aliases`, `summary` and `from_name` reading it. Each variant line gives the
/// canonical name, the aliases and the summary; attributes (derives, docs, serde) pass through.
///
/// ```
/// blockwell_core::spec_registry! {
///     /// Colours.
///     #[derive(Clone, Copy, Debug, PartialEq, Eq)]
///     pub enum Colour: "colour" {
///         Red => "red", ["rouge"], "the colour of blood";
///         DarkBlue => "dark-blue", [], "the colour of the night";
///     }
/// }
/// assert_eq!(Colour::from_name("Dark_Blue"), Ok(Colour::DarkBlue));
/// assert_eq!(Colour::from_name("ROUGE").map(Colour::name), Ok("red"));
/// let e = Colour::from_name("green").unwrap_err();
/// assert_eq!(e.to_string(), "unknown colour 'green' (known: red, dark-blue)");
/// ```
#[macro_export]
macro_rules! spec_registry {
    (
        $(#[$meta:meta])*
        $vis:vis enum $kind:ident: $what:literal {
            $( $(#[$vmeta:meta])* $variant:ident => $name:literal, [$($alias:literal),* $(,)?], $summary:literal; )*
        }
    ) => {
        $(#[$meta])*
        $vis enum $kind { $( $(#[$vmeta])* $variant ),* }

        impl $kind {
            /// Every kind, in listing order.
            pub const ALL: &'static [$kind] = &[$($kind::$variant),*];

            /// The names, aliases and summaries.
            pub const REGISTRY: $crate::spec::Registry<$kind> = $crate::spec::Registry::new($what, &[$(
                $crate::spec::Entry { kind: $kind::$variant, name: $name, aliases: &[$($alias),*], summary: $summary }
            ),*]);

            fn entry(self) -> &'static $crate::spec::Entry<$kind> {
                // The entries are declared in variant order.
                &Self::REGISTRY.list()[self as usize]
            }

            /// The canonical name (as on the command line).
            pub fn name(self) -> &'static str {
                self.entry().name
            }

            /// Other accepted spellings.
            pub fn aliases(self) -> &'static [&'static str] {
                self.entry().aliases
            }

            /// One line for `--help` and docs.
            pub fn summary(self) -> &'static str {
                self.entry().summary
            }

            /// Finds a kind by name or alias; case, blanks around, `-` and `_` are ignored
            /// (`spec::normalize_name`).
            pub fn from_name(s: &str) -> Result<Self, $crate::spec::UnknownName> {
                Self::REGISTRY.from_name(s)
            }
        }
    };
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

    crate::spec_registry! {
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        enum Fruit: "fruit" {
            Apple => "apple", ["pomme"], "round";
            BloodOrange => "blood-orange", ["sanguine"], "red inside";
        }
    }

    #[test]
    fn registry_finds_names_and_aliases_under_one_rule() {
        assert_eq!(Fruit::REGISTRY.validate(Fruit::ALL), Ok(()));
        for s in ["blood-orange", "Blood_Orange", " bloodorange ", "BLOOD-ORANGE", "sanguine"] {
            assert_eq!(Fruit::from_name(s), Ok(Fruit::BloodOrange), "{s}");
        }
        assert_eq!(
            (Fruit::Apple.name(), Fruit::Apple.aliases(), Fruit::Apple.summary()),
            ("apple", &["pomme"][..], "round")
        );
        let e = Fruit::from_name(" pear ").unwrap_err();
        assert_eq!(e, UnknownName { what: "fruit", name: "pear".into(), known: "apple, blood-orange".into() });
        assert_eq!(e.to_string(), "unknown fruit 'pear' (known: apple, blood-orange)");
        assert_eq!(Fruit::REGISTRY.list().iter().map(|e| e.kind).collect::<Vec<_>>(), Fruit::ALL);
        // Two entries answering to one spelling are found out.
        const CLASH: Registry<u8> = Registry::new(
            "clash",
            &[
                Entry { kind: 0, name: "a-b", aliases: &[], summary: "" },
                Entry { kind: 1, name: "ab", aliases: &[], summary: "" },
            ],
        );
        assert!(CLASH.validate(&[0, 1]).unwrap_err().contains("'ab'"));
        assert!(CLASH.validate(&[0]).is_err());
    }

    #[test]
    fn policies_and_prefetchers_are_found_by_every_spelling() {
        use crate::policy::PolicyKind;
        use crate::prefetch::PrefetcherKind;
        assert_eq!(PolicyKind::REGISTRY.validate(PolicyKind::ALL), Ok(()));
        assert_eq!(PrefetcherKind::REGISTRY.validate(PrefetcherKind::ALL), Ok(()));
        for s in ["LRU-K", "lruk", "lru_k", " Lru2 "] {
            assert_eq!(PolicyKind::from_name(s), Ok(PolicyKind::LruK), "{s}");
        }
        assert_eq!(PrefetcherKind::from_name("Linux-2.4"), Ok(PrefetcherKind::Linux24));
        let e = PrefetcherKind::from_name("nope").unwrap_err().to_string();
        assert_eq!(e, format!("unknown prefetcher 'nope' (known: {})", PrefetcherKind::REGISTRY.known()));
    }
}
