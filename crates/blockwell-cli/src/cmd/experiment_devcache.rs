//! `blockwell experiment device-caches`: seed `004_*`'s measurements (Koutoupis, "Advanced Hard Drive Caching
//! Techniques", 2013) reproduced live. fio (4 KiB, queue depth 32, sequential and random, read and write, as the
//! article) runs over NBD against five setups on emulated devices: the HDD alone, the SSD alone, Blockwell's
//! write-back cache device tier on the SSD in front of the HDD (FlashCache's and dm-cache's setup), Blockwell's
//! write-through RAM cache in front of the HDD (RapidCache's setup), and nbdkit's cache filter with
//! `cache=writeback` in front of the same emulated HDD. Then the durability check: a known pattern written
//! through each write-back setup, with and without FLUSH, the server killed with SIGKILL and restarted, the
//! pattern read back. The devices are `blockwell serve --delay` models (`hdd-004` and `ssd-004` by default,
//! calibrated to the article's device numbers); the page with the results and the calibration is
//! `docs/experiments/device-caches.md`.
//!
//! Every process this command starts (servers, nbdkit, fio) is killed by its PID on every way out, and the work
//! directory is removed (unless `--keep`).

use crate::cmd::options::{parse_arg, Bytes, Format, OutputArgs};
use anyhow::{anyhow, bail, Context};
use blockwell_disk::DiskSpec;
use serde::Serialize;
use serde_json::Value;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options of `blockwell experiment device-caches`.
#[derive(clap::Args, Debug, Clone)]
#[command(after_help = "\
Needs fio with its nbd engine and nbdkit (with its nbd plugin and cache filter). Each setup gets fresh images in \
the work directory. For a cache, one sequential read of the whole export in 1 MiB requests fills it first; \
then the jobs run in the order sequential read, random read, sequential write, random write. Each round runs \
every setup in turn; the table gives each job's median over the rounds and puts the article's numbers beside \
ours; three performance targets (the write-back cache's random writes near the SSD alone's and far above \
the HDD alone's, its warm random reads near the SSD alone's) are checked and printed with their values. Results and their comparison with the \
paper: docs/experiments/device-caches.md.")]
pub struct DevCacheArgs {
    /// Seconds per fio job [default: 10; --quick: 1].
    #[arg(long, value_name = "SECS")]
    pub runtime: Option<f64>,

    /// Rounds: each runs every setup in turn (so that a change in the machine's load hits all setups alike);
    /// the tables give each job's median [default: 3; --quick: 1].
    #[arg(long, value_name = "N")]
    pub rounds: Option<u32>,

    /// Size of each export (the region fio covers) [default: 1GiB; --quick: 64MiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_arg::<Bytes>)]
    pub size: Option<Bytes>,

    /// The test suite's run: 1 round, 1 s per job, 64 MiB exports, 2 MiB durability regions.
    #[arg(long)]
    pub quick: bool,

    /// The HDD's model for the slow-disk emulator (`blockwell disk list`).
    #[arg(long, value_name = "SPEC", default_value = "hdd-004", value_parser = parse_arg::<DiskSpec>)]
    pub hdd: DiskSpec,

    /// The SSD's model.
    #[arg(long, value_name = "SPEC", default_value = "ssd-004", value_parser = parse_arg::<DiskSpec>)]
    pub ssd: DiskSpec,

    /// Setups to run, comma-separated [default: all]: hdd, ssd, wb-ssd, wt-ram, nbdkit-wb.
    #[arg(long, value_name = "LIST")]
    pub configs: Option<String>,

    /// Skip the durability check.
    #[arg(long)]
    pub no_durability: bool,

    /// Work directory for the images and logs [default: a new directory in the system's temporary directory].
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// Keep the work directory (images, server logs) instead of removing it.
    #[arg(long)]
    pub keep: bool,

    /// The table, `--csv` (one line per setup and job) or `--json` (everything).
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The article's four numbers, MB/s: sequential read, sequential write, random read, random write.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ArticleRow {
    pub name: &'static str,
    pub mbps: [f64; 4],
}

/// The article's measurements (4 KiB, queue depth 32), in the order of [`JOBS`].
pub const ARTICLE: &[ArticleRow] = &[
    ArticleRow { name: "HDD", mbps: [115.0, 72.0, 2.0, 2.0] },
    ArticleRow { name: "SSD", mbps: [231.0, 74.0, 230.0, 72.0] },
    ArticleRow { name: "dm-cache", mbps: [105.0, 50.0, 67.0, 51.0] },
    ArticleRow { name: "FlashCache", mbps: [284.0, 72.0, 284.0, 71.0] },
    ArticleRow { name: "RapidCache", mbps: [794.0, 70.0, 901.0, 2.0] },
];

fn article(name: &str) -> ArticleRow {
    *ARTICLE.iter().find(|r| r.name == name).expect("a row of ARTICLE")
}

/// The four fio jobs, in the article's column order: (name, fio `rw`).
pub const JOBS: [(&str, &str); 4] =
    [("seq-read", "read"), ("seq-write", "write"), ("rand-read", "randread"), ("rand-write", "randwrite")];

/// The order the jobs run in (indices into [`JOBS`]): after the warm-up, the reads, then the writes.
const RUN_ORDER: [usize; 4] = [0, 2, 1, 3];

/// One setup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Setup {
    Hdd,
    Ssd,
    WriteBackSsd,
    WriteThroughRam,
    NbdkitWriteBack,
}

impl Setup {
    const ALL: [Setup; 5] =
        [Setup::Hdd, Setup::Ssd, Setup::WriteBackSsd, Setup::WriteThroughRam, Setup::NbdkitWriteBack];

    fn key(self) -> &'static str {
        match self {
            Setup::Hdd => "hdd",
            Setup::Ssd => "ssd",
            Setup::WriteBackSsd => "wb-ssd",
            Setup::WriteThroughRam => "wt-ram",
            Setup::NbdkitWriteBack => "nbdkit-wb",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Setup::Hdd => "HDD alone",
            Setup::Ssd => "SSD alone",
            Setup::WriteBackSsd => "Blockwell write-back, SSD tier",
            Setup::WriteThroughRam => "Blockwell write-through, RAM",
            Setup::NbdkitWriteBack => "nbdkit cache=writeback",
        }
    }

    /// The article's rows to compare with.
    fn article(self) -> Vec<ArticleRow> {
        match self {
            Setup::Hdd => vec![article("HDD")],
            Setup::Ssd => vec![article("SSD")],
            Setup::WriteBackSsd => vec![article("FlashCache"), article("dm-cache")],
            Setup::WriteThroughRam => vec![article("RapidCache")],
            Setup::NbdkitWriteBack => Vec::new(),
        }
    }

    fn is_cache(self) -> bool {
        !matches!(self, Setup::Hdd | Setup::Ssd)
    }

    fn parse(s: &str) -> anyhow::Result<Setup> {
        Setup::ALL.into_iter().find(|c| c.key() == s.trim()).ok_or_else(|| {
            anyhow!(
                "unknown setup '{s}' (known: {})",
                Setup::ALL.iter().map(|c| c.key()).collect::<Vec<_>>().join(", ")
            )
        })
    }
}

/// One fio job's result.
#[derive(Clone, Debug, Serialize)]
pub struct JobResult {
    pub job: &'static str,
    pub rw: &'static str,
    /// 10^6 bytes per second.
    pub mbps: f64,
    pub iops: f64,
    pub lat_mean_us: f64,
    pub lat_p99_us: f64,
    /// CPU time of the setup's servers (Blockwell, nbdkit) per request, in µs.
    pub server_cpu_us: f64,
    /// fio's CPU use (user + system), in % of one CPU.
    pub fio_cpu_pct: f64,
    /// `mbps` of every round, in order (the other fields are the median round's).
    pub rounds_mbps: Vec<f64>,
}

/// The pass that fills a cache before its read jobs.
#[derive(Clone, Debug, Serialize)]
pub struct Warmup {
    pub what: String,
    pub mbps: f64,
    pub seconds: f64,
}

/// One setup's results.
#[derive(Clone, Debug, Serialize)]
pub struct SetupResult {
    pub key: &'static str,
    pub label: &'static str,
    pub command: Vec<String>,
    /// In the order of [`JOBS`].
    pub jobs: Vec<JobResult>,
    pub warmup: Option<Warmup>,
    pub article: Vec<ArticleRow>,
    /// The server's `status --json` export after the jobs (Blockwell setups).
    pub status: Option<Value>,
}

impl SetupResult {
    fn mbps(&self, job: &str) -> Option<f64> {
        self.jobs.iter().find(|j| j.job == job).map(|j| j.mbps)
    }
}

/// A performance target (the write-back cache against the devices alone) and whether it is met.
#[derive(Clone, Debug, Serialize)]
pub struct Target {
    pub name: &'static str,
    pub what: String,
    pub value: f64,
    pub threshold: f64,
    pub pass: bool,
}

/// What came back of one region after the kill.
#[derive(Clone, Debug, Serialize)]
pub struct RegionCheck {
    /// 4 KiB blocks written.
    pub blocks: u64,
    /// Blocks read back through the restarted server with the bytes written.
    pub read_back: u64,
    /// Blocks with the bytes written in the origin's image file.
    pub on_origin: u64,
}

/// The durability check of one write-back setup.
#[derive(Clone, Debug, Serialize)]
pub struct DurabilityResult {
    pub key: &'static str,
    pub label: &'static str,
    /// Written, then FLUSH (and its reply) before the kill.
    pub flushed: RegionCheck,
    /// Written (every write acknowledged), no FLUSH, then `wait_ms` before the kill.
    pub unflushed: RegionCheck,
    pub flush_ms: f64,
    pub wait_ms: u64,
    /// How the setup was restarted and read.
    pub restart: String,
}

/// Everything the experiment measured.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub size: u64,
    pub runtime_s: f64,
    pub rounds: u32,
    pub hdd: String,
    pub ssd: String,
    pub fio: String,
    pub nbdkit: Option<String>,
    pub load_before: Option<String>,
    pub load_after: Option<String>,
    pub setups: Vec<SetupResult>,
    pub targets: Vec<Target>,
    pub durability: Vec<DurabilityResult>,
}

/// The processes of a run, killed by PID (SIGKILL) and reaped when dropped, whatever the way out.
#[derive(Default)]
struct Procs {
    children: Vec<(String, Child)>,
}

impl Procs {
    fn add(&mut self, name: &str, child: Child) {
        self.children.push((name.to_string(), child));
    }

    /// Kills `name` with SIGKILL (what `kill -9 PID` does) and reaps it.
    fn kill(&mut self, name: &str) {
        if let Some(i) = self.children.iter().position(|(n, _)| n == name) {
            let (_, mut c) = self.children.remove(i);
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// User + system CPU time of the running servers (every process but fio), in clock ticks.
    fn cpu_ticks(&self) -> u64 {
        self.children.iter().filter(|(n, _)| !n.starts_with("fio-")).map(|(_, c)| cpu_ticks(c.id())).sum()
    }

    fn kill_all(&mut self) {
        while let Some((_, mut c)) = self.children.pop() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// The work directory, removed when dropped unless kept.
struct WorkDir {
    path: PathBuf,
    keep: bool,
    created: bool,
}

impl WorkDir {
    fn new(dir: Option<&Path>, keep: bool) -> anyhow::Result<WorkDir> {
        let (path, created) = match dir {
            Some(d) => {
                std::fs::create_dir_all(d).with_context(|| format!("--dir {}", d.display()))?;
                (d.to_path_buf(), false)
            }
            None => {
                let nanos =
                    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
                let p = std::env::temp_dir().join(format!("blockwell-devcache-{}-{nanos}", std::process::id()));
                std::fs::create_dir(&p).with_context(|| format!("creating {}", p.display()))?;
                (p, true)
            }
        };
        Ok(WorkDir { path, keep, created })
    }

    fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Removes the files of one setup (images, sockets) as soon as it is done, to keep the disk usage to one
    /// setup's.
    fn remove(&self, names: &[&str]) {
        if !self.keep {
            for n in names {
                let _ = std::fs::remove_file(self.file(n));
            }
        }
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.keep {
            eprintln!("blockwell: work directory kept: {}", self.path.display());
        } else if self.created {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Settings of one run.
struct Run {
    size: u64,
    runtime: f64,
    region: u64,
    hdd: String,
    ssd: String,
    bin: PathBuf,
    stop: Arc<AtomicBool>,
    progress: bool,
}

impl Run {
    fn check_stop(&self) -> anyhow::Result<()> {
        if self.stop.load(Ordering::SeqCst) {
            bail!("interrupted");
        }
        Ok(())
    }

    fn note(&self, msg: &str) {
        if self.progress {
            eprintln!("blockwell: {msg}");
        }
    }

    /// Starts `blockwell serve` with `args` (plus a Unix socket `sock` and a control socket `ctl`), logging to
    /// `log`, and waits for its `ready` line. Connection threads run under the normal scheduling policy: an
    /// emulated device's sleeping requests must be woken on time (`docs/serve.md`, CPU scheduling).
    fn serve(&self, procs: &mut Procs, name: &str, args: &[String], wd: &WorkDir) -> anyhow::Result<Vec<String>> {
        let sock = wd.file(&format!("{name}.sock"));
        let ctl = wd.file(&format!("{name}.ctl"));
        let _ = std::fs::remove_file(&sock);
        let _ = std::fs::remove_file(&ctl);
        let mut cmd: Vec<String> = vec!["blockwell".into(), "serve".into()];
        cmd.extend(args.iter().cloned());
        cmd.extend(["--sched".into(), "normal".into()]);
        let log = std::fs::File::create(wd.file(&format!("{name}.log")))?;
        let mut child = Command::new(&self.bin)
            .args(&cmd[1..])
            .arg("--unix")
            .arg(&sock)
            .arg("--control")
            .arg(&ctl)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .context("starting blockwell serve")?;
        let out = child.stdout.take().expect("piped stdout");
        procs.add(name, child);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(out);
            let mut line = String::new();
            let mut ready = false;
            while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                if !ready && line.starts_with("blockwell: ready") {
                    ready = true;
                    let _ = tx.send(());
                }
                line.clear();
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            self.check_stop()?;
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(()) => break,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    bail!(
                        "blockwell serve ({name}) exited before it was ready: {}",
                        tail(&wd.file(&format!("{name}.log")))
                    )
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) if Instant::now() > deadline => {
                    bail!("blockwell serve ({name}) was not ready after 60 s")
                }
                Err(_) => {}
            }
        }
        cmd.extend(["--unix".into(), format!("{name}.sock"), "--control".into(), format!("{name}.ctl")]);
        Ok(cmd)
    }

    /// Starts nbdkit's cache filter (write-back, caching reads too, 4 KiB blocks) over the NBD export at
    /// `origin_sock`, its cache file in the work directory; waits for its PID file (written once it accepts).
    fn nbdkit(&self, procs: &mut Procs, name: &str, origin_sock: &Path, wd: &WorkDir) -> anyhow::Result<Vec<String>> {
        let sock = wd.file(&format!("{name}.sock"));
        let pid = wd.file(&format!("{name}.pid"));
        let _ = std::fs::remove_file(&sock);
        let _ = std::fs::remove_file(&pid);
        let args: Vec<String> = vec![
            "nbdkit".into(),
            "-f".into(),
            "-U".into(),
            sock.display().to_string(),
            "-P".into(),
            pid.display().to_string(),
            "--filter=cache".into(),
            "nbd".into(),
            format!("socket={}", origin_sock.display()),
            "export=blockwell".into(),
            "cache=writeback".into(),
            "cache-on-read=true".into(),
            "cache-min-block-size=4096".into(),
        ];
        let log = std::fs::File::create(wd.file(&format!("{name}.log")))?;
        let child = Command::new("nbdkit")
            .args(&args[1..])
            .env("TMPDIR", &wd.path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting nbdkit")?;
        procs.add(name, child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !pid.exists() {
            self.check_stop()?;
            if Instant::now() > deadline {
                bail!("nbdkit was not ready after 30 s: {}", tail(&wd.file(&format!("{name}.log"))));
            }
            if let Some((_, c)) = procs.children.iter_mut().find(|(n, _)| n == name) {
                if let Ok(Some(st)) = c.try_wait() {
                    bail!("nbdkit exited ({st}): {}", tail(&wd.file(&format!("{name}.log"))));
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut shown = args;
        shown[3] = format!("{name}.sock");
        shown[5] = format!("{name}.pid");
        shown[8] =
            format!("socket={}", origin_sock.file_name().map_or_else(String::new, |f| f.to_string_lossy().into()));
        Ok(shown)
    }

    /// Runs one fio job and returns its parsed JSON (the first job's).
    fn fio(&self, uri: &str, name: &str, args: &[String], procs: &mut Procs) -> anyhow::Result<Value> {
        let child = Command::new("fio")
            .arg(format!("--name={name}"))
            .arg("--ioengine=nbd")
            .arg(format!("--uri={uri}"))
            .args(args)
            .arg("--output-format=json")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting fio")?;
        let key = format!("fio-{name}");
        procs.add(&key, child);
        let (mut out, mut err) = {
            let (_, c) = procs.children.last_mut().expect("just added");
            (c.stdout.take().expect("piped"), c.stderr.take().expect("piped"))
        };
        // Both pipes are drained at once, so that neither can fill up and stall fio.
        let err_reader = std::thread::spawn(move || {
            let mut e = String::new();
            let _ = err.read_to_string(&mut e);
            e
        });
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            (s, err_reader.join().unwrap_or_default())
        });
        let status = loop {
            if self.stop.load(Ordering::SeqCst) {
                procs.kill(&key);
                bail!("interrupted");
            }
            let (_, c) = procs.children.iter_mut().find(|(n, _)| *n == key).expect("fio is running");
            if let Some(st) = c.try_wait()? {
                break st;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        procs.kill(&key);
        let (out, err) = reader.join().map_err(|_| anyhow!("fio's output reader panicked"))?;
        if !status.success() {
            bail!("fio {name} failed ({status}): {}", err.trim());
        }
        let start = out.find('{').ok_or_else(|| anyhow!("fio {name}: no JSON in its output: {out}{err}"))?;
        let v: Value = serde_json::from_str(&out[start..]).with_context(|| format!("fio {name}: its JSON"))?;
        let job = v["jobs"].get(0).cloned().ok_or_else(|| anyhow!("fio {name}: no job in its JSON"))?;
        if job["error"].as_i64().unwrap_or(0) != 0 {
            bail!("fio {name} reports error {}: {}", job["error"], err.trim());
        }
        Ok(job)
    }

    /// The four jobs (and the warm-up before the reads, for a cache) against `uri`.
    fn jobs(&self, uri: &str, setup: Setup, procs: &mut Procs) -> anyhow::Result<(Vec<JobResult>, Option<Warmup>)> {
        let mut results: Vec<Option<JobResult>> = vec![None, None, None, None];
        let mut warmup = None;
        for i in RUN_ORDER {
            self.check_stop()?;
            let (job, rw) = JOBS[i];
            if JOBS[i].1.contains("read") && setup.is_cache() && warmup.is_none() {
                let t = Instant::now();
                self.note(&format!("{}: warm-up (one sequential read of the export, 1 MiB requests)", setup.key()));
                let w = self.fio(
                    uri,
                    &format!("{}-warmup", setup.key()),
                    &[
                        "--rw=read".into(),
                        "--bs=1M".into(),
                        "--iodepth=4".into(),
                        format!("--size={}", self.size),
                        "--time_based=0".into(),
                    ],
                    procs,
                )?;
                let secs = t.elapsed().as_secs_f64();
                warmup = Some(Warmup {
                    what: "one sequential read of the whole export, 1 MiB requests, queue depth 4".into(),
                    mbps: w["read"]["bw_bytes"].as_f64().unwrap_or(0.0) / 1e6,
                    seconds: secs,
                });
            }
            self.note(&format!("{}: {job} ({} s)", setup.key(), self.runtime));
            let cpu0 = procs.cpu_ticks();
            let v = self.fio(
                uri,
                &format!("{}-{job}", setup.key()),
                &[
                    format!("--rw={rw}"),
                    "--bs=4k".into(),
                    "--iodepth=32".into(),
                    format!("--size={}", self.size),
                    format!("--runtime={}", self.runtime),
                    "--time_based=1".into(),
                ],
                procs,
            )?;
            let ticks = procs.cpu_ticks().saturating_sub(cpu0);
            let side = if rw.contains("read") { &v["read"] } else { &v["write"] };
            let clat = &side["clat_ns"];
            let ios = side["total_ios"].as_f64().unwrap_or(0.0).max(1.0);
            results[i] = Some(JobResult {
                job,
                rw,
                mbps: side["bw_bytes"].as_f64().unwrap_or(0.0) / 1e6,
                iops: side["iops"].as_f64().unwrap_or(0.0),
                lat_mean_us: clat["mean"].as_f64().unwrap_or(0.0) / 1e3,
                lat_p99_us: clat["percentile"]["99.000000"].as_f64().unwrap_or(0.0) / 1e3,
                server_cpu_us: ticks as f64 * 1e6 / USER_HZ / ios,
                fio_cpu_pct: v["usr_cpu"].as_f64().unwrap_or(0.0) + v["sys_cpu"].as_f64().unwrap_or(0.0),
                rounds_mbps: Vec::new(),
            });
        }
        Ok((results.into_iter().map(|r| r.expect("every job ran")).collect(), warmup))
    }

    /// The `blockwell serve` arguments of a Blockwell setup over `origin` (the HDD's image).
    fn serve_args(&self, setup: Setup, origin: &Path, dev: &Path) -> Vec<String> {
        let p = |x: &Path| x.display().to_string();
        let mut a: Vec<String> = vec!["--backend".into(), p(origin)];
        match setup {
            Setup::Hdd | Setup::NbdkitWriteBack => {
                a.extend(["--delay".into(), self.hdd.clone(), "--cache".into(), "0".into()])
            }
            Setup::Ssd => a.extend(["--delay".into(), self.ssd.clone(), "--cache".into(), "0".into()]),
            Setup::WriteBackSsd => a.extend([
                "--delay".into(),
                self.hdd.clone(),
                "--cache".into(),
                "0".into(),
                "--mode".into(),
                "write-back".into(),
                "--cache-dev".into(),
                p(dev),
                "--cache-dev-size".into(),
                self.dev_size().to_string(),
                "--cache-dev-delay".into(),
                self.ssd.clone(),
                "--cache-dev-cutoff".into(),
                "0".into(),
            ]),
            Setup::WriteThroughRam => a.extend([
                "--delay".into(),
                self.hdd.clone(),
                "--cache".into(),
                (self.size + self.size / 8).to_string(),
                "--policy".into(),
                "lru".into(),
                "--mode".into(),
                "write-through".into(),
            ]),
        }
        a
    }

    /// The cache device holds the whole export (FlashCache's 57 GB SSD held the article's 10 GiB HDD), with
    /// room for its metadata and reserve.
    fn dev_size(&self) -> u64 {
        (self.size + self.size / 8 + (64 << 20)).div_ceil(1 << 20) << 20
    }

    /// One setup: servers up, jobs, counters, everything down.
    fn setup(&self, setup: Setup, wd: &WorkDir) -> anyhow::Result<SetupResult> {
        let mut procs = Procs::default();
        let origin = wd.file(&format!("{}.img", setup.key()));
        let dev = wd.file(&format!("{}-cache.dev", setup.key()));
        sparse(&origin, self.size)?;
        let name = setup.key();
        let result = (|| {
            let (command, uri, ctl) = match setup {
                Setup::NbdkitWriteBack => {
                    let hdd = format!("{name}-origin");
                    let mut c = self.serve(&mut procs, &hdd, &self.serve_args(setup, &origin, &dev), wd)?;
                    c.push("&&".into());
                    c.extend(self.nbdkit(&mut procs, name, &wd.file(&format!("{hdd}.sock")), wd)?);
                    let uri = format!("nbd+unix:///?socket={}", wd.file(&format!("{name}.sock")).display());
                    (c, uri, None)
                }
                _ => {
                    let c = self.serve(&mut procs, name, &self.serve_args(setup, &origin, &dev), wd)?;
                    let uri = format!("nbd+unix:///blockwell?socket={}", wd.file(&format!("{name}.sock")).display());
                    (c, uri, Some(wd.file(&format!("{name}.ctl"))))
                }
            };
            let (jobs, warmup) = self.jobs(&uri, setup, &mut procs)?;
            let status = ctl.and_then(|c| status(&c).ok());
            Ok(SetupResult {
                key: setup.key(),
                label: setup.label(),
                command: command.into_iter().map(|a| relative(&a, &wd.path)).collect(),
                jobs,
                warmup,
                article: setup.article(),
                status,
            })
        })();
        procs.kill_all();
        wd.remove(&[
            &format!("{name}.img"),
            &format!("{name}-cache.dev"),
            &format!("{name}.sock"),
            &format!("{name}.ctl"),
            &format!("{name}-origin.sock"),
            &format!("{name}-origin.ctl"),
            &format!("{name}.pid"),
        ]);
        result
    }

    /// The durability check of one write-back setup (see [`DurabilityResult`]).
    fn durability(&self, setup: Setup, wd: &WorkDir) -> anyhow::Result<DurabilityResult> {
        let mut procs = Procs::default();
        let key = format!("{}-dur", setup.key());
        let origin = wd.file(&format!("{key}.img"));
        let dev = wd.file(&format!("{key}-cache.dev"));
        sparse(&origin, self.size)?;
        let region = self.region;
        let (a, b) = (0u64, region);
        let wait_ms = 2500;
        let result = (|| {
            // Up, write, kill.
            let (uri_sock, export, origin_name) = match setup {
                Setup::WriteBackSsd => {
                    self.serve(&mut procs, &key, &self.serve_args(setup, &origin, &dev), wd)?;
                    (wd.file(&format!("{key}.sock")), "blockwell", key.clone())
                }
                _ => {
                    let hdd = format!("{key}-origin");
                    self.serve(&mut procs, &hdd, &self.serve_args(Setup::Hdd, &origin, &dev), wd)?;
                    self.nbdkit(&mut procs, &key, &wd.file(&format!("{hdd}.sock")), wd)?;
                    (wd.file(&format!("{key}.sock")), "", hdd)
                }
            };
            self.note(&format!(
                "{}: durability: write {} MiB, FLUSH, write {} MiB, wait {wait_ms} ms, kill -9",
                setup.key(),
                region >> 20,
                region >> 20
            ));
            let mut c = nbd::Client::connect(&uri_sock, export)?;
            write_pattern(&mut c, a, region, 1)?;
            let t = Instant::now();
            c.flush()?;
            let flush_ms = t.elapsed().as_secs_f64() * 1e3;
            write_pattern(&mut c, b, region, 2)?;
            std::thread::sleep(Duration::from_millis(wait_ms));
            self.check_stop()?;
            procs.kill(&key);
            drop(c);
            // Restart and read back through the origin-facing server.
            let restart = match setup {
                Setup::WriteBackSsd => {
                    self.serve(&mut procs, &key, &self.serve_args(setup, &origin, &dev), wd)?;
                    "blockwell serve restarted on the same cache device and origin".to_string()
                }
                _ => {
                    self.nbdkit(&mut procs, &key, &wd.file(&format!("{origin_name}.sock")), wd)?;
                    "nbdkit started afresh over the same (still running) emulated HDD".to_string()
                }
            };
            let mut c = nbd::Client::connect(&uri_sock, export)?;
            let got_a = count_pattern(&c.read(a, region)?, a, 1);
            let got_b = count_pattern(&c.read(b, region)?, b, 2);
            drop(c);
            procs.kill_all();
            let img = std::fs::read(&origin).with_context(|| format!("reading {}", origin.display()))?;
            let span = |o: u64| &img[o as usize..(o + region) as usize];
            let blocks = region / BLOCK;
            Ok(DurabilityResult {
                key: setup.key(),
                label: setup.label(),
                flushed: RegionCheck { blocks, read_back: got_a, on_origin: count_pattern(span(a), a, 1) },
                unflushed: RegionCheck { blocks, read_back: got_b, on_origin: count_pattern(span(b), b, 2) },
                flush_ms,
                wait_ms,
                restart,
            })
        })();
        procs.kill_all();
        wd.remove(&[
            &format!("{key}.img"),
            &format!("{key}-cache.dev"),
            &format!("{key}.sock"),
            &format!("{key}.ctl"),
            &format!("{key}-origin.sock"),
            &format!("{key}-origin.ctl"),
            &format!("{key}.pid"),
        ]);
        result
    }
}

/// One setup's rounds as one result: per job, the round with the median rate (the lower middle one for an
/// even count), with every round's rate kept; the warm-up and the status of the last round.
fn combine(mut rounds: Vec<SetupResult>) -> SetupResult {
    let mut out = rounds.pop().expect("at least one round");
    rounds.push(out.clone());
    for (i, job) in out.jobs.iter_mut().enumerate() {
        let mut all: Vec<JobResult> = rounds.iter().map(|r| r.jobs[i].clone()).collect();
        let rates: Vec<f64> = all.iter().map(|j| j.mbps).collect();
        all.sort_by(|a, b| a.mbps.total_cmp(&b.mbps));
        *job = all.swap_remove((all.len() - 1) / 2);
        job.rounds_mbps = rates;
    }
    out
}

/// Clock ticks per second of /proc/PID/stat's times (USER_HZ, 100 on Linux whatever the kernel's HZ).
const USER_HZ: f64 = 100.0;

/// utime + stime of a process, in clock ticks (0 if it cannot be read).
fn cpu_ticks(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0 };
    // Fields after the command name, which is in parentheses and may contain spaces: utime and stime are the
    // 14th and 15th fields, the 12th and 13th after it.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else { return 0 };
    rest.split(' ').skip(11).take(2).filter_map(|f| f.parse::<u64>().ok()).sum()
}

/// 4 KiB: the block the checks count.
const BLOCK: u64 = 4096;

/// The pattern of `seed` at byte offset `off` (a 64-bit mix of the offset of each 8-byte word and the seed), so
/// that every block of every region has its own bytes.
fn pattern_word(off: u64, seed: u64) -> u64 {
    let mut x = (off / 8).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed.wrapping_mul(0xD1B5_4A32_D192_ED03);
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^ (x >> 29)
}

fn pattern(off: u64, len: u64, seed: u64) -> Vec<u8> {
    (0..len / 8).flat_map(|i| pattern_word(off + 8 * i, seed).to_le_bytes()).collect()
}

/// How many 4 KiB blocks of `data` (read from `off`) hold the pattern of `seed`.
fn count_pattern(data: &[u8], off: u64, seed: u64) -> u64 {
    data.chunks(BLOCK as usize)
        .enumerate()
        .filter(|(i, b)| *b == pattern(off + *i as u64 * BLOCK, b.len() as u64, seed).as_slice())
        .count() as u64
}

/// Writes the pattern of `seed` over `[off, off + len)` in 256 KiB requests (each one acknowledged).
fn write_pattern(c: &mut nbd::Client, off: u64, len: u64, seed: u64) -> anyhow::Result<()> {
    let step = 256 << 10;
    let mut o = off;
    while o < off + len {
        let n = step.min(off + len - o);
        c.write(o, &pattern(o, n, seed))?;
        o += n;
    }
    Ok(())
}

/// Creates (or truncates) a sparse file of `size` bytes.
fn sparse(path: &Path, size: u64) -> anyhow::Result<()> {
    let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    f.set_len(size).with_context(|| format!("sizing {}", path.display()))?;
    Ok(())
}

/// `path` relative to the work directory, for printed commands.
fn relative(arg: &str, dir: &Path) -> String {
    let d = format!("{}/", dir.display());
    arg.replace(&d, "")
}

/// The last lines of a log file, for an error message.
fn tail(path: &Path) -> String {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

/// The first export of a Blockwell server's `status json`.
fn status(ctl: &Path) -> anyhow::Result<Value> {
    let mut s = UnixStream::connect(ctl)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(b"status json\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let v: Value = serde_json::from_str(&out)?;
    v["exports"].get(0).cloned().ok_or_else(|| anyhow!("no export in the status"))
}

/// The first line of `prog --version`, if it runs.
fn version(prog: &str) -> Option<String> {
    let o = Command::new(prog).arg("--version").output().ok()?;
    o.status.success().then(|| String::from_utf8_lossy(&o.stdout).lines().next().unwrap_or("").trim().to_string())
}

/// The load average line of /proc/loadavg (the run's conditions on a shared machine).
fn loadavg() -> Option<String> {
    std::fs::read_to_string("/proc/loadavg").ok().map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

/// Checks that the tools are there: fio with its nbd engine, and (for the nbdkit setup) nbdkit with the nbd
/// plugin and the cache filter.
fn check_tools(need_nbdkit: bool) -> anyhow::Result<(String, Option<String>)> {
    let fio = version("fio").ok_or_else(|| anyhow!("fio is not installed (apt-get install fio)"))?;
    let o = Command::new("fio").arg("--enghelp=nbd").output().context("running fio --enghelp=nbd")?;
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    if !o.status.success() || !text.contains("uri") {
        bail!("this fio has no nbd engine (fio --enghelp=nbd): {}", text.trim());
    }
    if !need_nbdkit {
        return Ok((fio, None));
    }
    let nbdkit = version("nbdkit").ok_or_else(|| anyhow!("nbdkit is not installed (apt-get install nbdkit)"))?;
    let ok = Command::new("nbdkit")
        .args(["--filter=cache", "--dump-plugin", "nbd"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        bail!("nbdkit cannot load its nbd plugin with the cache filter (nbdkit --filter=cache --dump-plugin nbd)");
    }
    Ok((fio, Some(nbdkit)))
}

/// The performance targets over the measured setups (those that ran).
fn targets(setups: &[SetupResult]) -> Vec<Target> {
    let get = |k: &str, job: &str| setups.iter().find(|s| s.key == k).and_then(|s| s.mbps(job));
    let mut t = Vec::new();
    if let (Some(wb), Some(ssd)) = (get("wb-ssd", "rand-write"), get("ssd", "rand-write")) {
        t.push(Target {
            name: "wb-randwrite-vs-ssd",
            what: format!(
                "write-back random write {wb:.1} MB/s >= 80 % of the SSD alone's {ssd:.1} MB/s (the SSD model through \
                 the same path; the article's SSD: 72)"
            ),
            value: wb / ssd,
            threshold: 0.8,
            pass: wb >= 0.8 * ssd,
        });
    }
    if let (Some(wb), Some(hdd)) = (get("wb-ssd", "rand-write"), get("hdd", "rand-write")) {
        t.push(Target {
            name: "wb-randwrite-vs-hdd",
            what: format!("write-back random write {wb:.1} MB/s >= 20x the HDD alone's {hdd:.2} MB/s"),
            value: wb / hdd,
            threshold: 20.0,
            pass: wb >= 20.0 * hdd,
        });
    }
    if let (Some(wb), Some(ssd)) = (get("wb-ssd", "rand-read"), get("ssd", "rand-read")) {
        t.push(Target {
            name: "wb-randread-vs-ssd",
            what: format!(
                "warm random read from the SSD tier {wb:.1} MB/s >= 80 % of the SSD alone's {ssd:.1} MB/s (the \
                 article's SSD: 230)"
            ),
            value: wb / ssd,
            threshold: 0.8,
            pass: wb >= 0.8 * ssd,
        });
    }
    t
}

fn fmt_mbps(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The table, the targets and the durability check.
pub fn print(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "device caches (Koutoupis, Linux Journal): fio 4 KiB, queue depth 32, {} s per job, {} MiB export; HDD {}, SSD {}; MB/s = 10^6 B/s{}",
        r.runtime_s,
        r.size >> 20,
        r.hdd,
        r.ssd,
        if r.rounds > 1 { format!("; median of {} rounds", r.rounds) } else { String::new() }
    );
    let _ = writeln!(s);
    let _ = writeln!(s, "{:<34} {:>9} {:>9} {:>9} {:>9}", "setup", "seq read", "seq write", "rand read", "rand write");
    for st in &r.setups {
        let v: Vec<String> = st.jobs.iter().map(|j| fmt_mbps(j.mbps)).collect();
        let _ = writeln!(s, "{:<34} {:>9} {:>9} {:>9} {:>9}", st.label, v[0], v[1], v[2], v[3]);
        for a in &st.article {
            let v: Vec<String> = a.mbps.iter().map(|&m| fmt_mbps(m)).collect();
            let _ =
                writeln!(s, "{:<34} {:>9} {:>9} {:>9} {:>9}", format!("  article: {}", a.name), v[0], v[1], v[2], v[3]);
        }
        if st.article.is_empty() && st.key == "nbdkit-wb" {
            let _ =
                writeln!(s, "  (no counterpart in the article; its cache is a temporary file, in the page cache here)");
        }
    }
    if r.rounds > 1 {
        let _ = writeln!(s, "\nrange over the rounds (lowest-highest), same columns:");
        for st in &r.setups {
            let v: Vec<String> = st
                .jobs
                .iter()
                .map(|j| {
                    let lo = j.rounds_mbps.iter().copied().fold(f64::INFINITY, f64::min);
                    let hi = j.rounds_mbps.iter().copied().fold(0.0, f64::max);
                    format!("{}-{}", fmt_mbps(lo), fmt_mbps(hi))
                })
                .collect();
            let _ = writeln!(s, "{:<34} {:>9} {:>9} {:>9} {:>9}", st.label, v[0], v[1], v[2], v[3]);
        }
    }
    let _ = writeln!(s, "\nCPU per request of the median round (servers' µs / fio's % of a CPU), same columns:");
    for st in &r.setups {
        let v: Vec<String> = st.jobs.iter().map(|j| format!("{:.0}/{:.0}%", j.server_cpu_us, j.fio_cpu_pct)).collect();
        let _ = writeln!(s, "{:<34} {:>9} {:>9} {:>9} {:>9}", st.label, v[0], v[1], v[2], v[3]);
    }
    let warm: Vec<String> =
        r.setups.iter().filter_map(|st| st.warmup.as_ref().map(|w| format!("{} {:.0} MB/s", st.key, w.mbps))).collect();
    if !warm.is_empty() {
        let _ = writeln!(
            s,
            "\nwarm-up before the caches' read jobs (one sequential read of the export, 1 MiB requests): {}",
            warm.join(", ")
        );
    }
    if !r.targets.is_empty() {
        let _ = writeln!(s, "\nperformance targets (the write-back cache against the devices alone):");
        for t in &r.targets {
            let _ = writeln!(
                s,
                "  {} {}: {} (ratio {:.2}, needs {})",
                if t.pass { "PASS" } else { "FAIL" },
                t.name,
                t.what,
                t.value,
                t.threshold
            );
        }
    }
    if !r.durability.is_empty() {
        let _ = writeln!(
            s,
            "\ndurability: write region A, FLUSH, write region B (no FLUSH), wait, kill -9, restart, read back \
             (4 KiB blocks with the bytes written)"
        );
        let _ = writeln!(
            s,
            "{:<34} {:>16} {:>16} {:>16} {:>16} {:>10}",
            "setup", "A read back", "A on origin", "B read back", "B on origin", "FLUSH ms"
        );
        for d in &r.durability {
            let f = |x: u64, n: u64| format!("{x}/{n}");
            let _ = writeln!(
                s,
                "{:<34} {:>16} {:>16} {:>16} {:>16} {:>10.1}",
                d.label,
                f(d.flushed.read_back, d.flushed.blocks),
                f(d.flushed.on_origin, d.flushed.blocks),
                f(d.unflushed.read_back, d.unflushed.blocks),
                f(d.unflushed.on_origin, d.unflushed.blocks),
                d.flush_ms
            );
        }
        let w = r.durability.first().map_or(0, |d| d.wait_ms);
        let _ = writeln!(s, "(B was acknowledged write by write; {w} ms passed before the kill)");
    }
    if let (Some(a), Some(b)) = (&r.load_before, &r.load_after) {
        let _ = writeln!(s, "\nload average before / after: {a} / {b}");
    }
    s
}

/// One line per setup and job.
pub fn csv(r: &Report) -> String {
    let mut s = String::from("setup,job,mbps,iops,lat_mean_us,lat_p99_us,server_cpu_us,fio_cpu_pct\n");
    for st in &r.setups {
        for j in &st.jobs {
            let _ = writeln!(
                s,
                "{},{},{:.3},{:.1},{:.1},{:.1},{:.2},{:.1}",
                st.key, j.job, j.mbps, j.iops, j.lat_mean_us, j.lat_p99_us, j.server_cpu_us, j.fio_cpu_pct
            );
        }
    }
    s
}

/// `blockwell experiment device-caches`.
pub fn run(a: DevCacheArgs) -> anyhow::Result<ExitCode> {
    let runtime = a.runtime.unwrap_or(if a.quick { 1.0 } else { 10.0 });
    let rounds_n = a.rounds.unwrap_or(if a.quick { 1 } else { 3 });
    if rounds_n == 0 {
        bail!("--rounds: give at least 1");
    }
    if !(runtime.is_finite() && runtime > 0.0) {
        bail!("--runtime: give a number of seconds > 0");
    }
    let size = a.size.map_or(if a.quick { 64 << 20 } else { 1 << 30 }, |b| b.0);
    if size < (8 << 20) || size % (1 << 20) != 0 {
        bail!("--size: give a whole number of MiB, at least 8 MiB");
    }
    let setups: Vec<Setup> = match &a.configs {
        None => Setup::ALL.to_vec(),
        Some(l) => l
            .split(',')
            .filter(|x| !x.trim().is_empty())
            .map(Setup::parse)
            .collect::<Result<_, _>>()
            .context("--configs")?,
    };
    let durability: Vec<Setup> = if a.no_durability {
        Vec::new()
    } else {
        setups.iter().copied().filter(|s| matches!(s, Setup::WriteBackSsd | Setup::NbdkitWriteBack)).collect()
    };
    let (fio, nbdkit) = check_tools(setups.contains(&Setup::NbdkitWriteBack))?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
    }
    let run = Run {
        size,
        runtime,
        region: if a.quick { 2 << 20 } else { (size / 16).clamp(2 << 20, 64 << 20) },
        hdd: a.hdd.label().to_string(),
        ssd: a.ssd.label().to_string(),
        bin: std::env::current_exe().context("finding the blockwell binary")?,
        stop,
        progress: a.output.output.is_some() || a.output.format() == Format::Table,
    };
    let wd = WorkDir::new(a.dir.as_deref(), a.keep)?;
    let load_before = loadavg();
    let mut rounds: Vec<Vec<SetupResult>> = vec![Vec::new(); setups.len()];
    for round in 0..rounds_n {
        if rounds_n > 1 {
            run.note(&format!("round {} of {rounds_n}", round + 1));
        }
        for (i, s) in setups.iter().enumerate() {
            rounds[i].push(run.setup(*s, &wd).with_context(|| format!("setup {}", s.key()))?);
        }
    }
    let results: Vec<SetupResult> = rounds.into_iter().map(combine).collect();
    let mut dur = Vec::new();
    for s in &durability {
        dur.push(run.durability(*s, &wd).with_context(|| format!("durability of {}", s.key()))?);
    }
    let report = Report {
        size,
        runtime_s: runtime,
        rounds: rounds_n,
        hdd: run.hdd.clone(),
        ssd: run.ssd.clone(),
        fio,
        nbdkit,
        load_before,
        load_after: loadavg(),
        targets: targets(&results),
        setups: results,
        durability: dur,
    };
    let text = match a.output.format() {
        Format::Table => print(&report),
        Format::Csv => csv(&report),
        Format::Json => OutputArgs::json(&report)?,
    };
    a.output.write(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// A minimal NBD client (fixed newstyle handshake, NBD_OPT_GO, simple replies, one request at a time) for the
/// durability check: enough to write, flush and read back, with every reply checked.
mod nbd {
    use anyhow::{bail, Context};
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::path::Path;
    use std::time::Duration;

    const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
    const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
    const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
    const OPT_GO: u32 = 7;
    const REP_ACK: u32 = 1;
    const REQUEST_MAGIC: u32 = 0x2560_9513;
    const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
    const CMD_READ: u16 = 0;
    const CMD_WRITE: u16 = 1;
    const CMD_FLUSH: u16 = 3;

    pub struct Client {
        s: UnixStream,
        cookie: u64,
    }

    impl Client {
        pub fn connect(sock: &Path, export: &str) -> anyhow::Result<Client> {
            let mut s = UnixStream::connect(sock).with_context(|| format!("connecting to {}", sock.display()))?;
            s.set_read_timeout(Some(Duration::from_secs(120)))?;
            let mut h = [0u8; 18];
            s.read_exact(&mut h)?;
            if u64::from_be_bytes(h[0..8].try_into()?) != NBDMAGIC
                || u64::from_be_bytes(h[8..16].try_into()?) != IHAVEOPT
            {
                bail!("not a newstyle NBD server");
            }
            // Fixed newstyle, no zeroes.
            s.write_all(&3u32.to_be_bytes())?;
            let mut data = Vec::new();
            data.extend_from_slice(&(export.len() as u32).to_be_bytes());
            data.extend_from_slice(export.as_bytes());
            data.extend_from_slice(&0u16.to_be_bytes());
            let mut opt = Vec::new();
            opt.extend_from_slice(&IHAVEOPT.to_be_bytes());
            opt.extend_from_slice(&OPT_GO.to_be_bytes());
            opt.extend_from_slice(&(data.len() as u32).to_be_bytes());
            opt.extend_from_slice(&data);
            s.write_all(&opt)?;
            loop {
                let mut r = [0u8; 20];
                s.read_exact(&mut r)?;
                let typ = u32::from_be_bytes(r[12..16].try_into()?);
                let len = u32::from_be_bytes(r[16..20].try_into()?) as usize;
                if u64::from_be_bytes(r[0..8].try_into()?) != REPLY_MAGIC {
                    bail!("bad option reply magic");
                }
                let mut body = vec![0u8; len];
                s.read_exact(&mut body)?;
                if typ & 0x8000_0000 != 0 {
                    bail!("NBD_OPT_GO refused ({typ:#x}): {}", String::from_utf8_lossy(&body));
                }
                if typ == REP_ACK {
                    break;
                }
            }
            Ok(Client { s, cookie: 0 })
        }

        fn request(&mut self, typ: u16, offset: u64, len: u32, data: &[u8]) -> anyhow::Result<()> {
            self.cookie += 1;
            let mut q = Vec::with_capacity(28 + data.len());
            q.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
            q.extend_from_slice(&0u16.to_be_bytes());
            q.extend_from_slice(&typ.to_be_bytes());
            q.extend_from_slice(&self.cookie.to_be_bytes());
            q.extend_from_slice(&offset.to_be_bytes());
            q.extend_from_slice(&len.to_be_bytes());
            q.extend_from_slice(data);
            self.s.write_all(&q)?;
            let mut r = [0u8; 16];
            self.s.read_exact(&mut r)?;
            if u32::from_be_bytes(r[0..4].try_into()?) != SIMPLE_REPLY_MAGIC {
                bail!("bad reply magic");
            }
            if u64::from_be_bytes(r[8..16].try_into()?) != self.cookie {
                bail!("reply to another request");
            }
            let err = u32::from_be_bytes(r[4..8].try_into()?);
            if err != 0 {
                bail!("the server answered error {err}");
            }
            Ok(())
        }

        pub fn write(&mut self, offset: u64, data: &[u8]) -> anyhow::Result<()> {
            self.request(CMD_WRITE, offset, data.len() as u32, data).with_context(|| format!("NBD write at {offset}"))
        }

        pub fn flush(&mut self) -> anyhow::Result<()> {
            self.request(CMD_FLUSH, 0, 0, &[]).context("NBD flush")
        }

        pub fn read(&mut self, offset: u64, len: u64) -> anyhow::Result<Vec<u8>> {
            let mut out = Vec::with_capacity(len as usize);
            let step = 1u64 << 20;
            let mut o = offset;
            while o < offset + len {
                let n = step.min(offset + len - o);
                self.request(CMD_READ, o, n as u32, &[]).with_context(|| format!("NBD read at {o}"))?;
                let mut buf = vec![0u8; n as usize];
                self.s.read_exact(&mut buf)?;
                out.extend_from_slice(&buf);
                o += n;
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_differ_by_offset_and_seed_and_count_whole_blocks() {
        let p = pattern(8192, 3 * BLOCK, 1);
        assert_eq!(count_pattern(&p, 8192, 1), 3);
        assert_eq!(count_pattern(&p, 8192, 2), 0);
        assert_eq!(count_pattern(&p, 0, 1), 0);
        let mut q = p.clone();
        q[BLOCK as usize + 5] ^= 1;
        assert_eq!(count_pattern(&q, 8192, 1), 2, "one flipped bit loses that block");
        assert_eq!(count_pattern(&vec![0; 3 * BLOCK as usize], 8192, 1), 0);
    }

    #[test]
    fn targets_compare_the_setups_and_report_values() {
        let job = |job, mbps| JobResult {
            job,
            rw: "x",
            mbps,
            iops: 0.0,
            lat_mean_us: 0.0,
            lat_p99_us: 0.0,
            server_cpu_us: 0.0,
            fio_cpu_pct: 0.0,
            rounds_mbps: Vec::new(),
        };
        let setup = |key, r: [f64; 4]| SetupResult {
            key,
            label: key,
            command: Vec::new(),
            jobs: JOBS.iter().zip(r).map(|((n, _), m)| job(*n, m)).collect(),
            warmup: None,
            article: Vec::new(),
            status: None,
        };
        let s = vec![
            setup("hdd", [115.0, 72.0, 2.0, 2.0]),
            setup("ssd", [231.0, 74.0, 230.0, 72.0]),
            setup("wb-ssd", [200.0, 70.0, 150.0, 60.0]),
        ];
        let t = targets(&s);
        assert_eq!(t.len(), 3);
        assert!(t[0].pass && (t[0].value - 60.0 / 72.0).abs() < 1e-9, "{:?}", t[0]);
        assert!(t[1].pass && (t[1].value - 30.0).abs() < 1e-9);
        assert!(!t[2].pass && (t[2].value - 150.0 / 230.0).abs() < 1e-9);
        assert!(targets(&s[..2]).is_empty(), "no write-back setup, no target");
    }

    #[test]
    fn rounds_combine_to_the_median_round_of_each_job() {
        let round = |r: [f64; 4]| SetupResult {
            key: "ssd",
            label: "SSD alone",
            command: Vec::new(),
            jobs: JOBS
                .iter()
                .zip(r)
                .map(|((n, _), m)| JobResult {
                    job: n,
                    rw: "x",
                    mbps: m,
                    iops: m * 10.0,
                    lat_mean_us: 0.0,
                    lat_p99_us: 0.0,
                    server_cpu_us: 0.0,
                    fio_cpu_pct: 0.0,
                    rounds_mbps: Vec::new(),
                })
                .collect(),
            warmup: None,
            article: Vec::new(),
            status: None,
        };
        let c = combine(vec![round([3.0, 1.0, 5.0, 2.0]), round([1.0, 2.0, 4.0, 2.0]), round([2.0, 3.0, 6.0, 2.0])]);
        assert_eq!(c.jobs.iter().map(|j| j.mbps).collect::<Vec<_>>(), [2.0, 2.0, 5.0, 2.0]);
        assert_eq!(c.jobs[0].iops, 20.0, "the median round's other fields");
        assert_eq!(c.jobs[2].rounds_mbps, [5.0, 4.0, 6.0]);
        let one = combine(vec![round([1.0, 2.0, 3.0, 4.0])]);
        assert_eq!(one.jobs[3].rounds_mbps, [4.0]);
    }

    #[test]
    fn setups_parse_and_name_the_known_ones() {
        assert_eq!(Setup::parse("wb-ssd").unwrap(), Setup::WriteBackSsd);
        let e = Setup::parse("bcache").unwrap_err().to_string();
        assert!(e.contains("bcache") && e.contains("nbdkit-wb"), "{e}");
    }

    #[test]
    fn the_article_rows_are_in_the_job_order() {
        assert_eq!(JOBS.map(|(n, _)| n), ["seq-read", "seq-write", "rand-read", "rand-write"]);
        assert_eq!(article("RapidCache").mbps, [794.0, 70.0, 901.0, 2.0]);
        assert_eq!(article("dm-cache").mbps, [105.0, 50.0, 67.0, 51.0]);
        assert_eq!(RUN_ORDER.iter().copied().collect::<std::collections::BTreeSet<_>>().len(), 4);
    }
}
