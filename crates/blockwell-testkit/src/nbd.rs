//! A raw NBD client for tests that must send what no well-behaved client sends (floods, requests whose
//! replies are never read), written from the protocol document (NetworkBlockDevice/nbd `doc/proto.md`), not
//! from the server's code.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_CACHE: u16 = 5;

const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
const OPT_REPLY_MAGIC: u64 = 0x3_e889_0455_65a9;
const REQUEST_MAGIC: u32 = 0x2560_9513;
const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
const OPT_GO: u32 = 7;
const REP_ACK: u32 = 1;
const REP_INFO: u32 = 3;
const FLAG_FIXED_NEWSTYLE: u32 = 1;
const FLAG_NO_ZEROES: u32 = 2;

/// One connection in the transmission phase (simple replies).
pub struct RawClient {
    pub stream: TcpStream,
    /// The export's size, from `NBD_INFO_EXPORT`.
    pub size: u64,
}

impl RawClient {
    /// Connects to `addr` (`host:port`) and opens `export` with `NBD_OPT_GO`.
    pub fn open(addr: &str, export: &str) -> io::Result<RawClient> {
        let mut s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        s.set_nodelay(true)?;
        let mut g = [0; 18];
        s.read_exact(&mut g)?;
        if u64::from_be_bytes(g[..8].try_into().unwrap()) != NBDMAGIC
            || u64::from_be_bytes(g[8..16].try_into().unwrap()) != IHAVEOPT
        {
            return Err(bad("not an NBD newstyle server"));
        }
        s.write_all(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes())?;
        let mut data = (export.len() as u32).to_be_bytes().to_vec();
        data.extend_from_slice(export.as_bytes());
        data.extend_from_slice(&0u16.to_be_bytes());
        let mut m = IHAVEOPT.to_be_bytes().to_vec();
        m.extend_from_slice(&OPT_GO.to_be_bytes());
        m.extend_from_slice(&(data.len() as u32).to_be_bytes());
        m.extend_from_slice(&data);
        s.write_all(&m)?;
        let mut size = None;
        loop {
            let mut h = [0; 20];
            s.read_exact(&mut h)?;
            if u64::from_be_bytes(h[..8].try_into().unwrap()) != OPT_REPLY_MAGIC {
                return Err(bad("bad option reply magic"));
            }
            let typ = u32::from_be_bytes(h[12..16].try_into().unwrap());
            let mut d = vec![0; u32::from_be_bytes(h[16..].try_into().unwrap()) as usize];
            s.read_exact(&mut d)?;
            match typ {
                REP_INFO if d.len() >= 10 && d[..2] == [0, 0] => {
                    size = Some(u64::from_be_bytes(d[2..10].try_into().unwrap()))
                }
                REP_INFO => {}
                REP_ACK => break,
                t => return Err(bad(&format!("NBD_OPT_GO refused (reply type {t:#x})"))),
            }
        }
        Ok(RawClient { stream: s, size: size.ok_or_else(|| bad("no NBD_INFO_EXPORT"))? })
    }

    /// Sends one request (without waiting for its reply).
    pub fn send(&mut self, typ: u16, cookie: u64, offset: u64, len: u32, payload: &[u8]) -> io::Result<()> {
        let mut r = Vec::with_capacity(28 + payload.len());
        r.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
        r.extend_from_slice(&0u16.to_be_bytes());
        r.extend_from_slice(&typ.to_be_bytes());
        r.extend_from_slice(&cookie.to_be_bytes());
        r.extend_from_slice(&offset.to_be_bytes());
        r.extend_from_slice(&len.to_be_bytes());
        r.extend_from_slice(payload);
        self.stream.write_all(&r)
    }

    /// Reads one simple reply header: (error, cookie). The caller reads a READ's data.
    pub fn reply(&mut self) -> io::Result<(u32, u64)> {
        let mut h = [0; 16];
        self.stream.read_exact(&mut h)?;
        if u32::from_be_bytes(h[..4].try_into().unwrap()) != SIMPLE_REPLY_MAGIC {
            return Err(bad("bad reply magic"));
        }
        Ok((u32::from_be_bytes(h[4..8].try_into().unwrap()), u64::from_be_bytes(h[8..].try_into().unwrap())))
    }

    /// A READ and its reply: the data, or the NBD error.
    pub fn read(&mut self, offset: u64, len: u32) -> io::Result<Result<Vec<u8>, u32>> {
        self.send(CMD_READ, offset, offset, len, &[])?;
        let (err, cookie) = self.reply()?;
        if cookie != offset {
            return Err(bad("reply to another request"));
        }
        if err != 0 {
            return Ok(Err(err));
        }
        let mut d = vec![0; len as usize];
        self.stream.read_exact(&mut d)?;
        Ok(Ok(d))
    }
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}
