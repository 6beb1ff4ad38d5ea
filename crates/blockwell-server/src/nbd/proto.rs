//! Wire format and the pure, I/O-free parts of the NBD protocol: constants, the request header parser and
//! the option-haggling state machine ([`Negotiation`]).
//!
//! Nothing here touches a socket, so it can be tested on byte fixtures and fuzzed. **Fuzz entry point:**
//! [`fuzz_negotiation`] drives the whole handshake (client flags, then any sequence of options) over an
//! arbitrary byte string and must never panic; [`parse_request`] is the transmission-phase counterpart.
//!
//! Reference: the NBD protocol document (NetworkBlockDevice/nbd `doc/proto.md`).

use thiserror::Error;

pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
pub const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

// Handshake flags (server) and client flags.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

// Options.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;

// Option reply types.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
pub const REP_ERR_UNSUP: u32 = (1 << 31) | 1;
pub const REP_ERR_POLICY: u32 = (1 << 31) | 2;
pub const REP_ERR_INVALID: u32 = (1 << 31) | 3;
pub const REP_ERR_TLS_REQD: u32 = (1 << 31) | 5;
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) | 6;
pub const REP_ERR_TOO_BIG: u32 = (1 << 31) | 9;

// Info types.
pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

// Transmission flags.
pub const TFLAG_HAS_FLAGS: u16 = 1 << 0;
pub const TFLAG_READ_ONLY: u16 = 1 << 1;
pub const TFLAG_SEND_FLUSH: u16 = 1 << 2;
pub const TFLAG_SEND_FUA: u16 = 1 << 3;
pub const TFLAG_SEND_TRIM: u16 = 1 << 5;
pub const TFLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const TFLAG_CAN_MULTI_CONN: u16 = 1 << 8;
pub const TFLAG_SEND_CACHE: u16 = 1 << 10;
pub const TFLAG_SEND_FAST_ZERO: u16 = 1 << 11;

// Commands and command flags.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_CACHE: u16 = 5;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;
pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const CMD_FLAG_DF: u16 = 1 << 2;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

// Structured reply chunk types and flags.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) | 1;

// Error values on the wire.
pub const EPERM: u32 = 1;
pub const EIO: u32 = 5;
pub const ENOMEM: u32 = 12;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;
pub const EOVERFLOW: u32 = 75;
pub const ENOTSUP: u32 = 95;
pub const ESHUTDOWN: u32 = 108;

/// Block size constraints advertised with NBD_INFO_BLOCK_SIZE.
pub const MIN_BLOCK: u32 = 1;
pub const PREFERRED_BLOCK: u32 = 4096;
/// Largest READ/WRITE payload accepted (32 MiB); larger requests get EINVAL.
pub const MAX_PAYLOAD: u32 = 32 << 20;
/// Largest option payload accepted during haggling; larger is treated as abuse and the session closed.
pub const MAX_OPTION_LEN: u32 = 64 << 10;
/// The one metadata context offered (when the backend knows its holes); its id on the wire.
pub const BASE_ALLOCATION: &str = "base:allocation";
pub const BASE_ALLOCATION_ID: u32 = 1;

/// Size of a request header.
pub const REQUEST_LEN: usize = 28;
/// Size of an option header (IHAVEOPT, option, length).
pub const OPTION_HEADER_LEN: usize = 16;

/// A protocol violation after which the server closes the connection.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ProtocolError {
    #[error("unknown client flags {0:#x}")]
    ClientFlags(u32),
    #[error("bad option magic {0:#x}")]
    OptionMagic(u64),
    #[error("option {opt} payload of {len} bytes exceeds {max}")]
    OptionTooBig { opt: u32, len: u32, max: u32 },
    #[error("bad request magic {0:#x}")]
    RequestMagic(u32),
    #[error("unknown export {0:?} requested with NBD_OPT_EXPORT_NAME")]
    UnknownExport(String),
    #[error("input ended in the middle of a message")]
    Truncated,
    #[error("NBD_OPT_EXPORT_NAME before NBD_OPT_STARTTLS on a server that requires TLS")]
    TlsRequired,
}

/// A transmission-phase request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub flags: u16,
    pub typ: u16,
    pub cookie: u64,
    pub offset: u64,
    pub len: u32,
}

fn be_u16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// Parses a 28-byte request header. Fuzz target for the transmission phase.
pub fn parse_request(b: &[u8; REQUEST_LEN]) -> Result<Request, ProtocolError> {
    let magic = be_u32(&b[0..]);
    if magic != REQUEST_MAGIC {
        return Err(ProtocolError::RequestMagic(magic));
    }
    Ok(Request {
        flags: be_u16(&b[4..]),
        typ: be_u16(&b[6..]),
        cookie: be_u64(&b[8..]),
        offset: be_u64(&b[16..]),
        len: be_u32(&b[24..]),
    })
}

/// Encodes a request header (tests and clients).
pub fn encode_request(r: &Request) -> [u8; REQUEST_LEN] {
    let mut b = [0; REQUEST_LEN];
    b[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&r.flags.to_be_bytes());
    b[6..8].copy_from_slice(&r.typ.to_be_bytes());
    b[8..16].copy_from_slice(&r.cookie.to_be_bytes());
    b[16..24].copy_from_slice(&r.offset.to_be_bytes());
    b[24..28].copy_from_slice(&r.len.to_be_bytes());
    b
}

/// Parses an option header: returns (option, payload length). Rejects a bad magic or an oversize payload.
pub fn parse_option_header(b: &[u8; OPTION_HEADER_LEN]) -> Result<(u32, u32), ProtocolError> {
    let magic = be_u64(&b[0..]);
    if magic != IHAVEOPT {
        return Err(ProtocolError::OptionMagic(magic));
    }
    let opt = be_u32(&b[8..]);
    let len = be_u32(&b[12..]);
    if len > MAX_OPTION_LEN {
        return Err(ProtocolError::OptionTooBig { opt, len, max: MAX_OPTION_LEN });
    }
    Ok((opt, len))
}

/// The server's greeting: NBDMAGIC, IHAVEOPT, handshake flags.
pub fn greeting() -> [u8; 18] {
    let mut b = [0; 18];
    b[0..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    b[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    b[16..18].copy_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    b
}

/// What the option machine needs to know about an export (no backend, no I/O).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportInfo {
    pub name: String,
    pub description: String,
    pub size: u64,
    /// Transmission flags for this export.
    pub tflags: u16,
    /// The backend reports allocation (`base:allocation` may be negotiated).
    pub block_status: bool,
}

/// The outcome of one option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Keep haggling.
    Continue,
    /// The client aborted (NBD_OPT_ABORT, acknowledged): close after sending the output.
    Close,
    /// Enter transmission on export `index` after sending the output.
    Transmit { export: usize },
    /// NBD_OPT_STARTTLS was acknowledged: after sending the output, run the TLS handshake, call
    /// [`Negotiation::tls_started`] and go on haggling inside TLS.
    StartTls,
}

/// When a connection must, may or cannot use TLS (nbdkit's `--tls=off|on|require`; the protocol's
/// FORCEDTLS mode is `Require`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TlsMode {
    /// No TLS: NBD_OPT_STARTTLS gets NBD_REP_ERR_UNSUP.
    #[default]
    Off,
    /// TLS when the client asks for it.
    On,
    /// Every option but NBD_OPT_STARTTLS and NBD_OPT_ABORT gets NBD_REP_ERR_TLS_REQD until TLS is up, and
    /// NBD_OPT_EXPORT_NAME ends the session.
    Require,
}

/// What the server allows during option haggling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub tls: TlsMode,
    /// Whether NBD_OPT_LIST lists the exports (else NBD_REP_ERR_POLICY).
    pub list: bool,
    /// The export the empty name selects (None: the empty name is unknown, like any other).
    pub default_export: Option<usize>,
}

impl Policy {
    /// No TLS, listing allowed, and the empty name selects the export when there is exactly one.
    pub fn for_exports(n: usize) -> Policy {
        Policy { tls: TlsMode::Off, list: true, default_export: (n == 1).then_some(0) }
    }
}

/// What was negotiated when transmission starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Negotiated {
    pub structured_replies: bool,
    /// `base:allocation` was selected (its id is [`BASE_ALLOCATION_ID`]).
    pub base_allocation: bool,
}

/// The option-haggling state machine (fixed newstyle). Feed it the client flags, then each option; it
/// appends the bytes to send to `out`.
#[derive(Debug)]
pub struct Negotiation<'a> {
    exports: &'a [ExportInfo],
    policy: Policy,
    /// TLS is up (the rest of haggling and transmission run inside it).
    tls: bool,
    no_zeroes: bool,
    structured: bool,
    /// Export for which `base:allocation` was selected by SET_META_CONTEXT.
    meta_for: Option<String>,
}

impl<'a> Negotiation<'a> {
    /// Haggling under [`Policy::for_exports`].
    pub fn new(exports: &'a [ExportInfo]) -> Self {
        Self::with_policy(exports, Policy::for_exports(exports.len()))
    }

    pub fn with_policy(exports: &'a [ExportInfo], policy: Policy) -> Self {
        Negotiation { exports, policy, tls: false, no_zeroes: false, structured: false, meta_for: None }
    }

    /// The TLS handshake after [`Step::StartTls`] succeeded. What was negotiated in the clear is forgotten (a
    /// man in the middle could have chosen it).
    pub fn tls_started(&mut self) {
        self.tls = true;
        self.structured = false;
        self.meta_for = None;
    }

    /// The 32-bit client flags; unknown bits are a protocol error (the server must close).
    pub fn client_flags(&mut self, flags: u32) -> Result<(), ProtocolError> {
        if flags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
            return Err(ProtocolError::ClientFlags(flags));
        }
        self.no_zeroes = flags & FLAG_C_NO_ZEROES != 0;
        Ok(())
    }

    /// What was negotiated for the export entered with [`Step::Transmit`].
    pub fn negotiated(&self, export: usize) -> Negotiated {
        let name = &self.exports[export].name;
        Negotiated {
            structured_replies: self.structured,
            base_allocation: self.structured && self.meta_for.as_deref() == Some(name.as_str()),
        }
    }

    fn find(&self, name: &str) -> Option<usize> {
        if name.is_empty() {
            return self.policy.default_export.filter(|&i| i < self.exports.len());
        }
        self.exports.iter().position(|e| e.name == name)
    }

    /// Handles one option with its payload.
    pub fn option(&mut self, opt: u32, data: &[u8], out: &mut Vec<u8>) -> Result<Step, ProtocolError> {
        if self.policy.tls == TlsMode::Require && !self.tls && !matches!(opt, OPT_STARTTLS | OPT_ABORT) {
            if opt == OPT_EXPORT_NAME {
                return Err(ProtocolError::TlsRequired);
            }
            reply_err(out, opt, REP_ERR_TLS_REQD, "TLS is required: send NBD_OPT_STARTTLS first");
            return Ok(Step::Continue);
        }
        match opt {
            OPT_STARTTLS => {
                if self.policy.tls == TlsMode::Off {
                    reply_err(out, opt, REP_ERR_UNSUP, "this server has no TLS");
                } else if self.tls {
                    reply_err(out, opt, REP_ERR_INVALID, "TLS is already up");
                } else if !data.is_empty() {
                    reply_err(out, opt, REP_ERR_INVALID, "NBD_OPT_STARTTLS takes no data");
                } else {
                    reply(out, opt, REP_ACK, &[]);
                    return Ok(Step::StartTls);
                }
                Ok(Step::Continue)
            }
            OPT_EXPORT_NAME => {
                let name = String::from_utf8_lossy(data).into_owned();
                let Some(i) = self.find(&name) else {
                    return Err(ProtocolError::UnknownExport(name));
                };
                let e = &self.exports[i];
                out.extend_from_slice(&e.size.to_be_bytes());
                out.extend_from_slice(&e.tflags.to_be_bytes());
                if !self.no_zeroes {
                    out.extend_from_slice(&[0; 124]);
                }
                // base:allocation only counts if selected for this export name.
                if self.meta_for.as_deref() != Some(e.name.as_str()) {
                    self.meta_for = None;
                }
                Ok(Step::Transmit { export: i })
            }
            OPT_ABORT => {
                reply(out, opt, REP_ACK, &[]);
                Ok(Step::Close)
            }
            OPT_LIST => {
                if !self.policy.list {
                    reply_err(out, opt, REP_ERR_POLICY, "export listing is disabled on this server");
                    return Ok(Step::Continue);
                }
                if !data.is_empty() {
                    reply_err(out, opt, REP_ERR_INVALID, "NBD_OPT_LIST takes no data");
                    return Ok(Step::Continue);
                }
                for e in self.exports {
                    let mut d = Vec::with_capacity(4 + e.name.len() + e.description.len());
                    d.extend_from_slice(&(e.name.len() as u32).to_be_bytes());
                    d.extend_from_slice(e.name.as_bytes());
                    d.extend_from_slice(e.description.as_bytes());
                    reply(out, opt, REP_SERVER, &d);
                }
                reply(out, opt, REP_ACK, &[]);
                Ok(Step::Continue)
            }
            OPT_STRUCTURED_REPLY => {
                if !data.is_empty() {
                    reply_err(out, opt, REP_ERR_INVALID, "NBD_OPT_STRUCTURED_REPLY takes no data");
                } else {
                    self.structured = true;
                    reply(out, opt, REP_ACK, &[]);
                }
                Ok(Step::Continue)
            }
            OPT_INFO | OPT_GO => self.info_go(opt, data, out),
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
                self.meta_context(opt, data, out);
                Ok(Step::Continue)
            }
            _ => {
                reply_err(out, opt, REP_ERR_UNSUP, "option not supported");
                Ok(Step::Continue)
            }
        }
    }

    fn info_go(&mut self, opt: u32, data: &[u8], out: &mut Vec<u8>) -> Result<Step, ProtocolError> {
        let parsed = (|| {
            let mut r = Reader(data);
            let name_len = r.u32()? as usize;
            let name = r.bytes(name_len)?;
            let n = r.u16()? as usize;
            let mut infos = Vec::with_capacity(n.min(64));
            for _ in 0..n {
                infos.push(r.u16()?);
            }
            r.0.is_empty().then_some((String::from_utf8_lossy(name).into_owned(), infos))
        })();
        let Some((name, infos)) = parsed else {
            reply_err(out, opt, REP_ERR_INVALID, "malformed NBD_OPT_INFO/GO payload");
            return Ok(Step::Continue);
        };
        let Some(i) = self.find(&name) else {
            let why = if name.is_empty() { "no default export here: give an export name" } else { "unknown export" };
            reply_err(out, opt, REP_ERR_UNKNOWN, why);
            return Ok(Step::Continue);
        };
        let e = &self.exports[i];
        let mut d = Vec::with_capacity(12);
        d.extend_from_slice(&INFO_EXPORT.to_be_bytes());
        d.extend_from_slice(&e.size.to_be_bytes());
        d.extend_from_slice(&e.tflags.to_be_bytes());
        reply(out, opt, REP_INFO, &d);
        if infos.contains(&INFO_NAME) {
            let mut d = INFO_NAME.to_be_bytes().to_vec();
            d.extend_from_slice(e.name.as_bytes());
            reply(out, opt, REP_INFO, &d);
        }
        if infos.contains(&INFO_DESCRIPTION) && !e.description.is_empty() {
            let mut d = INFO_DESCRIPTION.to_be_bytes().to_vec();
            d.extend_from_slice(e.description.as_bytes());
            reply(out, opt, REP_INFO, &d);
        }
        // Block sizes are always sent: a minimum of 1 constrains nothing.
        let mut d = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
        for v in [MIN_BLOCK, PREFERRED_BLOCK, MAX_PAYLOAD] {
            d.extend_from_slice(&v.to_be_bytes());
        }
        reply(out, opt, REP_INFO, &d);
        reply(out, opt, REP_ACK, &[]);
        if opt == OPT_GO {
            if self.meta_for.as_deref() != Some(e.name.as_str()) {
                self.meta_for = None;
            }
            Ok(Step::Transmit { export: i })
        } else {
            Ok(Step::Continue)
        }
    }

    fn meta_context(&mut self, opt: u32, data: &[u8], out: &mut Vec<u8>) {
        let parsed = (|| {
            let mut r = Reader(data);
            let name_len = r.u32()? as usize;
            let name = r.bytes(name_len)?;
            let n = r.u32()? as usize;
            let mut queries = Vec::with_capacity(n.min(64));
            for _ in 0..n {
                let l = r.u32()? as usize;
                queries.push(String::from_utf8_lossy(r.bytes(l)?).into_owned());
            }
            r.0.is_empty().then_some((String::from_utf8_lossy(name).into_owned(), queries))
        })();
        let Some((name, queries)) = parsed else {
            reply_err(out, opt, REP_ERR_INVALID, "malformed meta context payload");
            return;
        };
        if opt == OPT_SET_META_CONTEXT && !self.structured {
            reply_err(out, opt, REP_ERR_INVALID, "NBD_OPT_SET_META_CONTEXT needs structured replies first");
            return;
        }
        let Some(i) = self.find(&name) else {
            reply_err(out, opt, REP_ERR_UNKNOWN, "unknown export");
            return;
        };
        let e = &self.exports[i];
        let matches = |q: &str| {
            if opt == OPT_LIST_META_CONTEXT {
                q == "base:" || q == BASE_ALLOCATION
            } else {
                q == BASE_ALLOCATION
            }
        };
        let selected = e.block_status
            && if opt == OPT_LIST_META_CONTEXT && queries.is_empty() {
                true
            } else {
                queries.iter().any(|q| matches(q))
            };
        if opt == OPT_SET_META_CONTEXT {
            // Each SET replaces the previous selection.
            self.meta_for = selected.then(|| e.name.clone());
        }
        if selected {
            let id = if opt == OPT_SET_META_CONTEXT { BASE_ALLOCATION_ID } else { 0 };
            let mut d = id.to_be_bytes().to_vec();
            d.extend_from_slice(BASE_ALLOCATION.as_bytes());
            reply(out, opt, REP_META_CONTEXT, &d);
        }
        reply(out, opt, REP_ACK, &[]);
    }
}

/// Appends an option reply.
pub fn reply(out: &mut Vec<u8>, opt: u32, typ: u32, data: &[u8]) {
    out.extend_from_slice(&OPT_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&opt.to_be_bytes());
    out.extend_from_slice(&typ.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

fn reply_err(out: &mut Vec<u8>, opt: u32, typ: u32, msg: &str) {
    reply(out, opt, typ, msg.as_bytes());
}

struct Reader<'b>(&'b [u8]);

impl<'b> Reader<'b> {
    fn bytes(&mut self, n: usize) -> Option<&'b [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u16(&mut self) -> Option<u16> {
        self.bytes(2).map(be_u16)
    }
    fn u32(&mut self) -> Option<u32> {
        self.bytes(4).map(be_u32)
    }
}

/// Runs the handshake over `input` (what a client sent after the greeting: client flags, then options)
/// against `exports`, appending the server's replies to `out`. Returns the step that ended haggling and
/// the number of input bytes consumed (the rest belongs to the transmission phase), or the protocol error.
/// Input that ends mid-option gives [`ProtocolError::Truncated`].
///
/// An acknowledged NBD_OPT_STARTTLS is taken as a TLS handshake that succeeded: the rest of the input is what
/// the client sends inside TLS.
pub fn negotiate_bytes(
    exports: &[ExportInfo],
    policy: Policy,
    input: &[u8],
    out: &mut Vec<u8>,
) -> Result<(Step, Negotiated, usize), ProtocolError> {
    let mut r = Reader(input);
    let mut n = Negotiation::with_policy(exports, policy);
    n.client_flags(r.u32().ok_or(ProtocolError::Truncated)?)?;
    loop {
        let h: &[u8; OPTION_HEADER_LEN] =
            r.bytes(OPTION_HEADER_LEN).ok_or(ProtocolError::Truncated)?.try_into().expect("16 bytes");
        let (opt, len) = parse_option_header(h)?;
        let data = r.bytes(len as usize).ok_or(ProtocolError::Truncated)?;
        match n.option(opt, data, out)? {
            Step::Continue => {}
            Step::StartTls => n.tls_started(),
            step => {
                let neg = match step {
                    Step::Transmit { export } => n.negotiated(export),
                    _ => Negotiated::default(),
                };
                return Ok((step, neg, input.len() - r.0.len()));
            }
        }
    }
}

/// Fuzz target: the handshake on arbitrary bytes against two fixed exports must never panic.
pub fn fuzz_negotiation(input: &[u8]) {
    let exports = [
        ExportInfo {
            name: "a".into(),
            description: "first".into(),
            size: 1 << 20,
            tflags: TFLAG_HAS_FLAGS,
            block_status: true,
        },
        ExportInfo { name: "b".into(), description: String::new(), size: 0, tflags: 3, block_status: false },
    ];
    // The first byte picks the policy: every TLS mode, listing on or off, a default export or none.
    let Some((&pick, input)) = input.split_first() else { return };
    let tls = [TlsMode::Off, TlsMode::On, TlsMode::Require][usize::from(pick % 3)];
    let policy = Policy { tls, list: pick & 4 == 0, default_export: (pick & 8 == 0).then_some(1) };
    let mut out = Vec::new();
    let _ = negotiate_bytes(&exports, policy, input, &mut out);
    if input.len() >= REQUEST_LEN {
        let _ = parse_request(input[..REQUEST_LEN].try_into().expect("28 bytes"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exports() -> Vec<ExportInfo> {
        vec![
            ExportInfo {
                name: "disk".into(),
                description: "the disk".into(),
                size: 1 << 20,
                tflags: TFLAG_HAS_FLAGS | TFLAG_SEND_FLUSH,
                block_status: true,
            },
            ExportInfo {
                name: "ro".into(),
                description: String::new(),
                size: 4096,
                tflags: TFLAG_HAS_FLAGS | TFLAG_READ_ONLY,
                block_status: false,
            },
        ]
    }

    fn opt(code: u32, data: &[u8]) -> Vec<u8> {
        let mut v = IHAVEOPT.to_be_bytes().to_vec();
        v.extend_from_slice(&code.to_be_bytes());
        v.extend_from_slice(&(data.len() as u32).to_be_bytes());
        v.extend_from_slice(data);
        v
    }

    fn go_data(name: &str, infos: &[u16]) -> Vec<u8> {
        let mut v = (name.len() as u32).to_be_bytes().to_vec();
        v.extend_from_slice(name.as_bytes());
        v.extend_from_slice(&(infos.len() as u16).to_be_bytes());
        for i in infos {
            v.extend_from_slice(&i.to_be_bytes());
        }
        v
    }

    fn meta_data(name: &str, queries: &[&str]) -> Vec<u8> {
        let mut v = (name.len() as u32).to_be_bytes().to_vec();
        v.extend_from_slice(name.as_bytes());
        v.extend_from_slice(&(queries.len() as u32).to_be_bytes());
        for q in queries {
            v.extend_from_slice(&(q.len() as u32).to_be_bytes());
            v.extend_from_slice(q.as_bytes());
        }
        v
    }

    /// Splits server output into option replies (option, type, data).
    fn replies(mut out: &[u8]) -> Vec<(u32, u32, Vec<u8>)> {
        let mut v = Vec::new();
        while !out.is_empty() {
            assert_eq!(be_u64(out), OPT_REPLY_MAGIC);
            let len = be_u32(&out[16..]) as usize;
            v.push((be_u32(&out[8..]), be_u32(&out[12..]), out[20..20 + len].to_vec()));
            out = &out[20 + len..];
        }
        v
    }

    fn flags(f: u32) -> Vec<u8> {
        f.to_be_bytes().to_vec()
    }

    #[test]
    fn request_header_round_trip_and_bad_magic() {
        let r = Request { flags: CMD_FLAG_FUA, typ: CMD_WRITE, cookie: 0xdead_beef_0102, offset: 4095, len: 3 };
        let b = encode_request(&r);
        assert_eq!(parse_request(&b), Ok(r));
        let mut bad = b;
        bad[0] ^= 1;
        assert!(matches!(parse_request(&bad), Err(ProtocolError::RequestMagic(_))));
    }

    #[test]
    fn greeting_is_nbdmagic_ihaveopt_and_flags() {
        let g = greeting();
        assert_eq!(&g[..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
        assert_eq!(be_u16(&g[16..]), FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
    }

    #[test]
    fn unknown_option_is_unsupported_then_go_works() {
        let mut input = flags(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
        input.extend(opt(0x4242, b"whatever"));
        input.extend(opt(OPT_GO, &go_data("disk", &[INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE])));
        input.extend_from_slice(b"trailing");
        let mut out = Vec::new();
        let (step, neg, used) = negotiate_bytes(&exports(), policy(), &input, &mut out).unwrap();
        assert_eq!(step, Step::Transmit { export: 0 });
        assert_eq!(neg, Negotiated::default());
        assert_eq!(used, input.len() - 8);
        let r = replies(&out);
        assert_eq!(r[0].0, 0x4242);
        assert_eq!(r[0].1, REP_ERR_UNSUP);
        let infos: Vec<u16> = r[1..r.len() - 1]
            .iter()
            .map(|(_, t, d)| {
                assert_eq!(*t, REP_INFO);
                be_u16(d)
            })
            .collect();
        assert_eq!(infos, [INFO_EXPORT, INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE]);
        let export = &r[1].2;
        assert_eq!(be_u64(&export[2..]), 1 << 20);
        assert_eq!(be_u16(&export[10..]), TFLAG_HAS_FLAGS | TFLAG_SEND_FLUSH);
        assert_eq!(&r[3].2[2..], b"the disk");
        let bs = &r[4].2;
        assert_eq!((be_u32(&bs[2..]), be_u32(&bs[6..]), be_u32(&bs[10..])), (1, 4096, 32 << 20));
        assert_eq!(r.last().unwrap().1, REP_ACK);
    }

    /// Plain haggling with listing on and the first export as the default.
    fn policy() -> Policy {
        Policy { tls: TlsMode::Off, list: true, default_export: Some(0) }
    }

    #[test]
    fn unknown_export_in_go_is_err_unknown_and_session_continues() {
        let mut input = flags(FLAG_C_FIXED_NEWSTYLE);
        input.extend(opt(OPT_INFO, &go_data("nope", &[])));
        input.extend(opt(OPT_GO, &go_data("", &[])));
        let mut out = Vec::new();
        let (step, _, _) = negotiate_bytes(&exports(), policy(), &input, &mut out).unwrap();
        assert_eq!(step, Step::Transmit { export: 0 }, "empty name is the default export");
        assert_eq!(replies(&out)[0].1, REP_ERR_UNKNOWN);
        // Without a default export the empty name is unknown, and says so.
        let mut out = Vec::new();
        let p = Policy { default_export: None, ..policy() };
        assert_eq!(negotiate_bytes(&exports(), p, &input, &mut out), Err(ProtocolError::Truncated));
        let r = replies(&out);
        assert_eq!((r[1].1, String::from_utf8_lossy(&r[1].2).contains("no default export")), (REP_ERR_UNKNOWN, true));
        assert_eq!(Policy::for_exports(1).default_export, Some(0));
        assert_eq!(Policy::for_exports(2).default_export, None);
    }

    #[test]
    fn listing_can_be_refused_by_policy() {
        let mut input = flags(FLAG_C_FIXED_NEWSTYLE);
        input.extend(opt(OPT_LIST, &[]));
        input.extend(opt(OPT_ABORT, &[]));
        let mut out = Vec::new();
        let p = Policy { list: false, ..policy() };
        assert_eq!(negotiate_bytes(&exports(), p, &input, &mut out).unwrap().0, Step::Close);
        assert_eq!(replies(&out)[0].1, REP_ERR_POLICY);
    }

    #[test]
    fn tls_modes_follow_the_spec() {
        let starttls = opt(OPT_STARTTLS, &[]);
        // Off: STARTTLS is unsupported, haggling goes on in the clear.
        let mut input = flags(FLAG_C_FIXED_NEWSTYLE);
        input.extend(&starttls);
        input.extend(opt(OPT_GO, &go_data("disk", &[])));
        let mut out = Vec::new();
        assert_eq!(negotiate_bytes(&exports(), policy(), &input, &mut out).unwrap().0, Step::Transmit { export: 0 });
        assert_eq!(replies(&out)[0].1, REP_ERR_UNSUP);
        // Require: options before STARTTLS get TLS_REQD (ABORT excepted); STARTTLS is acknowledged; inside
        // TLS, a second STARTTLS is invalid and what was negotiated in the clear is forgotten.
        let req = Policy { tls: TlsMode::Require, ..policy() };
        let mut input = flags(FLAG_C_FIXED_NEWSTYLE);
        input.extend(opt(OPT_LIST, &[]));
        input.extend(opt(OPT_STRUCTURED_REPLY, &[]));
        input.extend(opt(OPT_GO, &go_data("disk", &[])));
        input.extend(&starttls);
        input.extend(&starttls);
        input.extend(opt(OPT_GO, &go_data("disk", &[])));
        let mut out = Vec::new();
        let (step, neg, _) = negotiate_bytes(&exports(), req.clone(), &input, &mut out).unwrap();
        assert_eq!(step, Step::Transmit { export: 0 });
        assert!(!neg.structured_replies, "the clear-text STRUCTURED_REPLY was refused");
        let types: Vec<u32> = replies(&out).iter().map(|r| r.1).collect();
        assert_eq!(&types[..5], [REP_ERR_TLS_REQD, REP_ERR_TLS_REQD, REP_ERR_TLS_REQD, REP_ACK, REP_ERR_INVALID]);
        // Require: EXPORT_NAME in the clear ends the session; ABORT is still honoured.
        let mut input = flags(FLAG_C_FIXED_NEWSTYLE);
        input.extend(opt(OPT_EXPORT_NAME, b"rw"));
        assert_eq!(negotiate_bytes(&exports(), req.clone(), &input, &mut Vec::new()), Err(ProtocolError::TlsRequired));
        let mut input = flags(FLAG_C_FIXED_NEWSTYLE);
        input.extend(opt(OPT_ABORT, &[]));
        assert_eq!(negotiate_bytes(&exports(), req, &input, &mut Vec::new()).unwrap().0, Step::Close);
        // On: STARTTLS optional; structured replies negotiated before it are forgotten.
        let on = Policy { tls: TlsMode::On, ..policy() };
        let mut input = flags(FLAG_C_FIXED_NEWSTYLE);
        input.extend(opt(OPT_STRUCTURED_REPLY, &[]));
        input.extend(&starttls);
        input.extend(opt(OPT_GO, &go_data("disk", &[])));
        let (_, neg, _) = negotiate_bytes(&exports(), on, &input, &mut Vec::new()).unwrap();
        assert!(!neg.structured_replies);
    }

    #[test]
    fn export_name_with_and_without_zeroes() {
        for (f, extra) in [(FLAG_C_FIXED_NEWSTYLE, 124), (FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES, 0)] {
            let mut input = flags(f);
            input.extend(opt(OPT_EXPORT_NAME, b"ro"));
            let mut out = Vec::new();
            let (step, _, _) = negotiate_bytes(&exports(), policy(), &input, &mut out).unwrap();
            assert_eq!(step, Step::Transmit { export: 1 });
            assert_eq!(out.len(), 10 + extra);
            assert_eq!(be_u64(&out), 4096);
        }
        let mut input = flags(0);
        input.extend(opt(OPT_EXPORT_NAME, b"missing"));
        let r = negotiate_bytes(&exports(), policy(), &input, &mut Vec::new());
        assert!(matches!(r, Err(ProtocolError::UnknownExport(_))));
    }

    #[test]
    fn list_names_every_export_with_description() {
        let mut input = flags(1);
        input.extend(opt(OPT_LIST, &[]));
        input.extend(opt(OPT_ABORT, &[]));
        let mut out = Vec::new();
        let (step, _, _) = negotiate_bytes(&exports(), policy(), &input, &mut out).unwrap();
        assert_eq!(step, Step::Close);
        let r = replies(&out);
        assert_eq!(r.len(), 4);
        assert_eq!((r[0].1, &r[0].2[4..]), (REP_SERVER, &b"diskthe disk"[..]));
        assert_eq!((r[1].1, &r[1].2[4..]), (REP_SERVER, &b"ro"[..]));
        assert_eq!((r[2].1, r[3].1), (REP_ACK, REP_ACK));
    }

    #[test]
    fn bad_magic_bad_flags_oversize_and_truncation_are_errors() {
        let e = exports();
        assert!(matches!(
            negotiate_bytes(&e, policy(), &flags(0x80), &mut Vec::new()),
            Err(ProtocolError::ClientFlags(_))
        ));
        let mut input = flags(1);
        input.extend_from_slice(b"GARBAGE!garbage!");
        assert!(matches!(negotiate_bytes(&e, policy(), &input, &mut Vec::new()), Err(ProtocolError::OptionMagic(_))));
        let mut input = flags(1);
        input.extend_from_slice(&IHAVEOPT.to_be_bytes());
        input.extend_from_slice(&OPT_GO.to_be_bytes());
        input.extend_from_slice(&(MAX_OPTION_LEN + 1).to_be_bytes());
        assert!(matches!(
            negotiate_bytes(&e, policy(), &input, &mut Vec::new()),
            Err(ProtocolError::OptionTooBig { .. })
        ));
        let mut input = flags(1);
        input.extend(opt(OPT_GO, &go_data("disk", &[])));
        input.truncate(input.len() - 1);
        assert_eq!(negotiate_bytes(&e, policy(), &input, &mut Vec::new()), Err(ProtocolError::Truncated));
    }

    #[test]
    fn malformed_go_is_err_invalid() {
        let mut input = flags(1);
        let mut bad = go_data("disk", &[INFO_NAME]);
        bad.push(0);
        input.extend(opt(OPT_GO, &bad));
        input.extend(opt(OPT_GO, &[0, 0, 1, 0]));
        input.extend(opt(OPT_ABORT, &[]));
        let mut out = Vec::new();
        negotiate_bytes(&exports(), policy(), &input, &mut out).unwrap();
        let r = replies(&out);
        assert_eq!((r[0].1, r[1].1, r[2].1), (REP_ERR_INVALID, REP_ERR_INVALID, REP_ACK));
    }

    #[test]
    fn meta_context_only_where_block_status_known_and_after_structured_replies() {
        let e = exports();
        let mut input = flags(1);
        input.extend(opt(OPT_SET_META_CONTEXT, &meta_data("disk", &[BASE_ALLOCATION])));
        input.extend(opt(OPT_STRUCTURED_REPLY, &[]));
        input.extend(opt(OPT_LIST_META_CONTEXT, &meta_data("disk", &[])));
        input.extend(opt(OPT_LIST_META_CONTEXT, &meta_data("ro", &[])));
        input.extend(opt(OPT_SET_META_CONTEXT, &meta_data("disk", &["qemu:dirty-bitmap:x", BASE_ALLOCATION])));
        input.extend(opt(OPT_GO, &go_data("disk", &[])));
        let mut out = Vec::new();
        let (step, neg, _) = negotiate_bytes(&e, policy(), &input, &mut out).unwrap();
        assert_eq!(step, Step::Transmit { export: 0 });
        assert_eq!(neg, Negotiated { structured_replies: true, base_allocation: true });
        let types: Vec<u32> = replies(&out).iter().map(|r| r.1).collect();
        assert_eq!(
            types,
            [
                REP_ERR_INVALID,
                REP_ACK,
                REP_META_CONTEXT,
                REP_ACK,
                REP_ACK,
                REP_META_CONTEXT,
                REP_ACK,
                REP_INFO,
                REP_INFO,
                REP_ACK
            ]
        );
        // Selected for "disk", then GO on "ro": the context does not carry over.
        let mut input = flags(1);
        input.extend(opt(OPT_STRUCTURED_REPLY, &[]));
        input.extend(opt(OPT_SET_META_CONTEXT, &meta_data("disk", &[BASE_ALLOCATION])));
        input.extend(opt(OPT_GO, &go_data("ro", &[])));
        let (_, neg, _) = negotiate_bytes(&e, policy(), &input, &mut Vec::new()).unwrap();
        assert_eq!(neg, Negotiated { structured_replies: true, base_allocation: false });
    }

    #[test]
    fn fuzz_entry_survives_prefixes_and_junk() {
        let mut input = flags(3);
        input.extend(opt(OPT_STRUCTURED_REPLY, &[]));
        input.extend(opt(OPT_SET_META_CONTEXT, &meta_data("a", &[BASE_ALLOCATION])));
        input.extend(opt(OPT_LIST_META_CONTEXT, &[0xff; 12]));
        input.extend(opt(OPT_GO, &go_data("a", &[0xffff, 1, 2, 3])));
        for n in 0..input.len() {
            fuzz_negotiation(&input[..n]);
            let mut m = input.clone();
            m[n] ^= 0x5a;
            fuzz_negotiation(&m);
        }
    }
}
