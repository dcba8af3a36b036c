//! `baton-bench-http`: the HTTP load generator of `bench/serve_bench.py`,
//! std only (HTTP/1.1 with keep-alive over `TcpStream`, `Content-Length` or
//! chunked responses).
//!
//! ```text
//! baton-bench-http rate  --addr A --path P --body JSON --rate R --duration S [--conns C]
//! baton-bench-http burst --addr A --path P --body JSON --count N [--conns C]
//! baton-bench-http seq   --addr A --path P --body JSON --count N
//! baton-bench-http exec  --count N -- ARGV...
//! baton-bench-http fsync --file F --count N
//! ```
//!
//! - `rate` is open loop: request i is due at start + i/R, whatever happened
//!   to the others. C connections take the next due request as soon as they
//!   are free, and a request's latency counts from when it was *due*, not
//!   from when a connection was free to send it, so a slow response shows in
//!   the latencies of the requests queued behind it (no coordinated
//!   omission).
//! - `burst` sends N requests as fast as C connections allow (each waits for
//!   its response before sending the next) and reports when the first was
//!   sent and the last answered, on the Unix clock (milliseconds).
//! - `seq` sends N requests one after the other on one connection.
//! - `exec` runs ARGV N times (fork + exec, stdout and stderr captured
//!   through pipes, like a job's) and times each.
//! - `fsync` appends 200 bytes to F and `fdatasync`s it, N times: the floor
//!   under any acknowledgement that is durable on this disk.
//!
//! Prints one JSON object on stdout: latencies in microseconds (p50, p90,
//! p99, p999, max, mean), the number of responses by status code, and the
//! body of the first response whose status was not 2xx.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(mode) = args.first().cloned() else {
        die("usage: baton-bench-http rate|burst|seq|exec [options] (see the source)");
    };
    let (opts, rest) = parse_opts(&args[1..]);
    let out = match mode.as_str() {
        "rate" => rate(&opts),
        "burst" => burst(&opts),
        "seq" => seq(&opts),
        "exec" => exec(&opts, &rest),
        "fsync" => fsync(&opts),
        other => die(&format!(
            "unknown mode '{other}' (use rate, burst, seq, exec or fsync)"
        )),
    };
    println!("{out}");
}

fn die(msg: &str) -> ! {
    eprintln!("baton-bench-http: {msg}");
    std::process::exit(2);
}

struct Opts(BTreeMap<String, String>);

impl Opts {
    fn get(&self, k: &str) -> String {
        self.0
            .get(k)
            .cloned()
            .unwrap_or_else(|| die(&format!("missing --{k}")))
    }
    fn num<T: std::str::FromStr>(&self, k: &str, default: Option<T>) -> T {
        match self.0.get(k) {
            Some(v) => v
                .parse()
                .unwrap_or_else(|_| die(&format!("--{k}: '{v}' is not a number"))),
            None => default.unwrap_or_else(|| die(&format!("missing --{k}"))),
        }
    }
    fn target(&self) -> Target {
        let addr: SocketAddr = self
            .get("addr")
            .parse()
            .unwrap_or_else(|e| die(&format!("--addr: {e}")));
        let path = self.get("path");
        let body = self.0.get("body").cloned().unwrap_or_default();
        let token = self.0.get("token").cloned();
        let mut req = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        );
        if let Some(t) = token {
            req.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(&body);
        Target {
            addr,
            request: req.into_bytes(),
        }
    }
}

fn parse_opts(args: &[String]) -> (Opts, Vec<String>) {
    let mut map = BTreeMap::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "--" {
            return (Opts(map), args[i + 1..].to_vec());
        }
        let Some(k) = a.strip_prefix("--") else {
            die(&format!("unexpected argument '{a}'"));
        };
        let Some(v) = args.get(i + 1) else {
            die(&format!("--{k} needs a value"));
        };
        map.insert(k.to_string(), v.clone());
        i += 2;
    }
    (Opts(map), Vec::new())
}

#[derive(Clone)]
struct Target {
    addr: SocketAddr,
    request: Vec<u8>,
}

/// One keep-alive connection.
struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Conn {
    fn open(addr: SocketAddr) -> Conn {
        let s = TcpStream::connect(addr).unwrap_or_else(|e| die(&format!("connect {addr}: {e}")));
        let _ = s.set_nodelay(true);
        let writer = s
            .try_clone()
            .unwrap_or_else(|e| die(&format!("cannot clone a socket: {e}")));
        Conn {
            reader: BufReader::new(s),
            writer,
        }
    }

    /// Sends the target's request and records the answer in `tally`, with
    /// the time since `since`; after a failure, opens a new connection.
    fn call_recorded(&mut self, target: &Target, tally: &mut Tally, since: Instant) {
        let result = self.call(&target.request);
        let failed = result.is_err();
        tally.record(result, since.elapsed());
        if failed {
            *self = Conn::open(target.addr);
        }
    }

    /// Sends the request and reads the whole response: (status, body).
    fn call(&mut self, request: &[u8]) -> std::io::Result<(u16, Vec<u8>)> {
        self.writer.write_all(request)?;
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad(format!("bad status line {line:?}")))?;
        let mut length: Option<usize> = None;
        let mut chunked = false;
        loop {
            line.clear();
            if self.reader.read_line(&mut line)? == 0 {
                return Err(bad("connection closed in the headers".into()));
            }
            let h = line.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                let k = k.trim().to_ascii_lowercase();
                let v = v.trim();
                if k == "content-length" {
                    length = v.parse().ok();
                } else if k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked") {
                    chunked = true;
                }
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                line.clear();
                self.reader.read_line(&mut line)?;
                let size_hex = line.trim().split(';').next().unwrap_or("");
                let size = usize::from_str_radix(size_hex, 16)
                    .map_err(|_| bad(format!("bad chunk size {line:?}")))?;
                let mut chunk = vec![0; size + 2];
                self.reader.read_exact(&mut chunk)?;
                chunk.truncate(size);
                body.extend_from_slice(&chunk);
                if size == 0 {
                    break;
                }
            }
        } else if let Some(n) = length {
            body.resize(n, 0);
            self.reader.read_exact(&mut body)?;
        } else {
            return Err(bad("response without Content-Length".into()));
        }
        Ok((status, body))
    }
}

fn bad(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg)
}

fn unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

/// What all requests of a run gave.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u64>,
    statuses: BTreeMap<u16, u64>,
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    fn record(&mut self, result: std::io::Result<(u16, Vec<u8>)>, latency: Duration) {
        self.latencies_us
            .push(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX));
        match result {
            Ok((status, body)) => {
                *self.statuses.entry(status).or_default() += 1;
                if !(200..300).contains(&status) && self.first_error.is_none() {
                    self.first_error =
                        Some(format!("{status}: {}", String::from_utf8_lossy(&body)));
                }
            }
            Err(e) => {
                self.errors += 1;
                if self.first_error.is_none() {
                    self.first_error = Some(e.to_string());
                }
            }
        }
    }

    fn merge(&mut self, other: Tally) {
        self.latencies_us.extend(other.latencies_us);
        for (k, v) in other.statuses {
            *self.statuses.entry(k).or_default() += v;
        }
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }

    fn json(mut self, extra: &[(&str, String)]) -> String {
        self.latencies_us.sort_unstable();
        let l = &self.latencies_us;
        let pct = |p: f64| -> u64 {
            if l.is_empty() {
                return 0;
            }
            let i = ((p / 100.0) * (l.len() - 1) as f64).round() as usize;
            l[i.min(l.len() - 1)]
        };
        let mean = if l.is_empty() {
            0
        } else {
            l.iter().sum::<u64>() / l.len() as u64
        };
        let statuses: Vec<String> = self
            .statuses
            .iter()
            .map(|(k, v)| format!("\"{k}\": {v}"))
            .collect();
        let mut fields = vec![
            format!("\"count\": {}", l.len()),
            format!("\"p50_us\": {}", pct(50.0)),
            format!("\"p90_us\": {}", pct(90.0)),
            format!("\"p99_us\": {}", pct(99.0)),
            format!("\"p999_us\": {}", pct(99.9)),
            format!("\"max_us\": {}", l.last().copied().unwrap_or(0)),
            format!("\"mean_us\": {mean}"),
            format!("\"statuses\": {{{}}}", statuses.join(", ")),
            format!("\"errors\": {}", self.errors),
            format!(
                "\"first_error\": {}",
                self.first_error.as_deref().map_or("null".into(), json_str)
            ),
        ];
        for (k, v) in extra {
            fields.push(format!("\"{k}\": {v}"));
        }
        format!("{{{}}}", fields.join(", "))
    }
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Open loop at a fixed rate; latency from each request's due time.
fn rate(opts: &Opts) -> String {
    let target = opts.target();
    let rate: f64 = opts.num("rate", None);
    let secs: f64 = opts.num("duration", None);
    let conns: usize = opts.num("conns", Some(4));
    let total = (rate * secs).round() as u64;
    let next = Arc::new(AtomicU64::new(0));
    let late = Arc::new(AtomicU64::new(0));
    let tally = Arc::new(Mutex::new(Tally::default()));
    // Connect first, so connection set-up is not in the latencies.
    let mut opened: Vec<Conn> = (0..conns).map(|_| Conn::open(target.addr)).collect();
    let start = Instant::now() + Duration::from_millis(50);
    let threads: Vec<_> = opened
        .drain(..)
        .map(|mut conn| {
            let (next, late, tally, target) = (
                Arc::clone(&next),
                Arc::clone(&late),
                Arc::clone(&tally),
                target.clone(),
            );
            std::thread::spawn(move || {
                let mut mine = Tally::default();
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= total {
                        break;
                    }
                    let due = start + Duration::from_secs_f64(i as f64 / rate);
                    let now = Instant::now();
                    if due > now {
                        std::thread::sleep(due - now);
                    } else if now - due > Duration::from_millis(1) {
                        late.fetch_add(1, Ordering::Relaxed);
                    }
                    conn.call_recorded(&target, &mut mine, due);
                }
                tally
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .merge(mine);
            })
        })
        .collect();
    for t in threads {
        if t.join().is_err() {
            die("a connection thread panicked");
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let tally = std::mem::take(
        &mut *tally
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    tally.json(&[
        ("target_rate", format!("{rate}")),
        ("achieved_rate", format!("{:.1}", total as f64 / elapsed)),
        ("elapsed_s", format!("{elapsed:.3}")),
        ("conns", conns.to_string()),
        (
            "sent_late_over_1ms",
            late.load(Ordering::Relaxed).to_string(),
        ),
    ])
}

/// As fast as C connections allow.
fn burst(opts: &Opts) -> String {
    let target = opts.target();
    let count: u64 = opts.num("count", None);
    let conns: usize = opts.num("conns", Some(4));
    let next = Arc::new(AtomicU64::new(0));
    let mut opened: Vec<Conn> = (0..conns).map(|_| Conn::open(target.addr)).collect();
    let first_ms = unix_ms();
    let start = Instant::now();
    let threads: Vec<_> = opened
        .drain(..)
        .map(|mut conn| {
            let (next, target) = (Arc::clone(&next), target.clone());
            std::thread::spawn(move || {
                let mut mine = Tally::default();
                while next.fetch_add(1, Ordering::SeqCst) < count {
                    conn.call_recorded(&target, &mut mine, Instant::now());
                }
                mine
            })
        })
        .collect();
    let mut tally = Tally::default();
    for t in threads {
        match t.join() {
            Ok(m) => tally.merge(m),
            Err(_) => die("a connection thread panicked"),
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    tally.json(&[
        ("first_send_unix_ms", format!("{first_ms:.3}")),
        ("last_ack_unix_ms", format!("{:.3}", unix_ms())),
        ("elapsed_s", format!("{elapsed:.3}")),
        ("conns", conns.to_string()),
    ])
}

/// One after the other, on one connection.
fn seq(opts: &Opts) -> String {
    let target = opts.target();
    let count: u64 = opts.num("count", None);
    let mut conn = Conn::open(target.addr);
    let mut tally = Tally::default();
    let mut last_body = String::new();
    for _ in 0..count {
        let t0 = Instant::now();
        let result = conn.call(&target.request);
        let latency = t0.elapsed();
        match &result {
            Ok((_, body)) => last_body = String::from_utf8_lossy(body).into_owned(),
            Err(_) => conn = Conn::open(target.addr),
        }
        tally.record(result, latency);
    }
    tally.json(&[("last_body", json_str(&last_body))])
}

/// ARGV N times, output through pipes.
fn exec(opts: &Opts, argv: &[String]) -> String {
    let count: u64 = opts.num("count", None);
    let Some((program, args)) = argv.split_first() else {
        die("exec needs -- ARGV");
    };
    let mut tally = Tally::default();
    let mut last = String::new();
    for _ in 0..count {
        let t0 = Instant::now();
        let out = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output();
        let latency = t0.elapsed();
        let result = out.map(|o| {
            last = String::from_utf8_lossy(&o.stdout).into_owned();
            (if o.status.success() { 200 } else { 500 }, o.stderr)
        });
        tally.record(result, latency);
    }
    tally.json(&[("last_stdout", json_str(&last))])
}

/// Append + fdatasync, N times.
fn fsync(opts: &Opts) -> String {
    let path = opts.get("file");
    let count: u64 = opts.num("count", None);
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| die(&format!("cannot open {path}: {e}")));
    let record = [b'x'; 200];
    let mut tally = Tally::default();
    for _ in 0..count {
        let t0 = Instant::now();
        let result = file
            .write_all(&record)
            .and_then(|()| file.sync_data())
            .map(|()| (200, Vec::new()));
        tally.record(result, t0.elapsed());
    }
    tally.json(&[])
}
