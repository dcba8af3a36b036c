#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! TLS to PostgreSQL through the real `baton` binary: `sslmode` and
//! `sslrootcert` in the backend and store URLs, against private PostgreSQL
//! clusters each test starts itself (initdb in a temp dir, a free port on
//! 127.0.0.1, `ssl=on` with a server certificate for `localhost` issued by a
//! CA the test makes with the `openssl` command, or `ssl=off`). The
//! clusters are stopped when the test ends, passed or not.
//!
//! The machine's PostgreSQL binaries (`/usr/lib/postgresql/*/bin`) and
//! `openssl` must be there: a missing one fails the tests. As root, the
//! cluster runs as the `postgres` user (initdb refuses root).

use crate::common;
use crate::serve_common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{code, stderr, stdout, Env};
use serde_json::json;
use serve_common::{sh_config, Server};

/// The newest `/usr/lib/postgresql/N/bin` that has `initdb`.
fn pg_bin() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL's binaries must be in /usr/lib/postgresql/*/bin for these tests")
        .filter_map(|e| {
            let e = e.ok()?;
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .expect("no /usr/lib/postgresql/*/bin/initdb: install PostgreSQL's server")
        .1
}

/// The uid and gid of `postgres` (from /etc/passwd).
fn postgres_ids() -> (u32, u32) {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let line = passwd
        .lines()
        .find(|l| l.starts_with("postgres:"))
        .expect("running as root, the cluster needs the postgres user");
    let fields: Vec<&str> = line.split(':').collect();
    (fields[2].parse().unwrap(), fields[3].parse().unwrap())
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `cmd` and fails the test, with its output, unless it succeeds.
fn check(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        stdout(&out),
        stderr(&out)
    );
}

/// `openssl ARGS` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    check(
        Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .stdin(Stdio::null()),
        &format!("openssl {}", args.join(" ")),
    );
}

/// A CA (`NAME.crt`, `NAME.key`) in `dir`.
fn make_ca(dir: &Path, name: &str) -> PathBuf {
    let (crt, key) = (format!("{name}.crt"), format!("{name}.key"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &crt,
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
    dir.join(crt)
}

/// `server.crt`/`server.key` for `localhost` only, signed by CA `ca`.
fn make_server_cert(dir: &Path, ca: &str) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost\nbasicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    );
}

/// A private PostgreSQL cluster, stopped on drop.
struct Cluster {
    tmp: tempfile::TempDir,
    child: Option<Child>,
    port: u16,
    /// The CA that signed the server's certificate.
    ca: PathBuf,
    /// A CA that signed nothing the server has.
    other_ca: PathBuf,
}

impl Cluster {
    /// initdb, certificates, and the server started (TLS on or off).
    fn start(ssl: bool) -> Cluster {
        let bin = pg_bin();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let ca = make_ca(dir, "ca");
        let other_ca = make_ca(dir, "other-ca");
        make_server_cert(dir, "ca");
        let owner = is_root().then(postgres_ids);
        if let Some((uid, gid)) = owner {
            for entry in std::fs::read_dir(dir).unwrap() {
                std::os::unix::fs::chown(entry.unwrap().path(), Some(uid), Some(gid)).unwrap();
            }
            std::os::unix::fs::chown(dir, Some(uid), Some(gid)).unwrap();
        }
        // The server refuses a key others may read.
        std::fs::set_permissions(
            dir.join("server.key"),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        let data = dir.join("data");
        check(
            as_owner(owner, &bin.join("initdb"), dir)
                .arg("-D")
                .arg(&data)
                .args(["-U", "postgres", "-A", "trust", "--no-sync"])
                .args(["--no-instructions", "-E", "UTF8", "--locale=C"]),
            "initdb",
        );
        let port = free_port();
        let log = std::fs::File::create(dir.join("server.log")).unwrap();
        let on = |b: bool| if b { "on" } else { "off" };
        let child = as_owner(owner, &bin.join("postgres"), dir)
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "unix_socket_directories="])
            .args(["-c", &format!("ssl={}", on(ssl))])
            .args([
                "-c",
                &format!("ssl_cert_file={}", dir.join("server.crt").display()),
            ])
            .args([
                "-c",
                &format!("ssl_key_file={}", dir.join("server.key").display()),
            ])
            .args(["-c", "fsync=off", "-c", "max_connections=40"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start postgres");
        let mut cluster = Cluster {
            tmp,
            child: Some(child),
            port,
            ca,
            other_ca,
        };
        cluster.wait_ready();
        cluster
    }

    /// Waits until the server takes connections (or fails with its log).
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("postgres exited ({status}): {}", self.log());
                }
            }
            if self.try_query("SELECT 1").is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "postgres did not start: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.tmp.path().join("server.log")).unwrap_or_default()
    }

    /// `postgres://postgres@HOST:PORT/postgres?PARAMS`.
    fn url(&self, host: &str, params: &str) -> String {
        let mut url = format!("postgres://postgres@{host}:{}/postgres", self.port);
        if !params.is_empty() {
            url.push('?');
            url.push_str(params);
        }
        url
    }

    /// `sslmode=MODE&sslrootcert=CA`.
    fn verify(&self, mode: &str, ca: &Path) -> String {
        format!("sslmode={mode}&sslrootcert={}", ca.display())
    }

    /// Runs `sql` on a plain admin connection; rows as text.
    fn try_query(&self, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        let conn = format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=disable connect_timeout=5",
            self.port
        );
        baton_testkit::pg::try_query(&conn, sql)
    }

    fn query(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        self.try_query(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Whether each session of application `app` uses TLS (`t`/`f`),
    /// sorted.
    fn ssl_of(&self, app: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .query(&format!(
                "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
                 WHERE a.application_name = '{app}' AND a.pid <> pg_backend_pid()"
            ))
            .into_iter()
            .map(|r| r[0].clone().unwrap_or_default())
            .collect();
        v.sort();
        v
    }

    /// Fast shutdown, then KILL if it takes too long; waits for the exit.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = i32::try_from(child.id()).unwrap();
        // SAFETY: kill has no memory effects; `pid` is our own child, not
        // yet reaped, so it cannot have been reused.
        unsafe { libc::kill(pid, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `program` run as `owner` (uid, gid) when given, in `dir`, with a clean
/// environment. `setpriv` execs the program itself, so the child is the
/// program (its pid is the server's), and it gets TERM if the test dies.
fn as_owner(owner: Option<(u32, u32)>, program: &Path, dir: &Path) -> Command {
    let mut c = match owner {
        Some((uid, gid)) => {
            let mut c = Command::new("setpriv");
            c.args([
                &format!("--reuid={uid}"),
                &format!("--regid={gid}"),
                "--clear-groups",
                "--pdeathsig=TERM",
                "--",
            ])
            .arg(program);
            c
        }
        None => Command::new(program),
    };
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("LC_ALL", "C")
        .current_dir(dir);
    c
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// `baton --backend URL ARGS`.
fn baton(env: &Env, url: &str, args: &[&str]) -> Output {
    let mut all = vec!["--backend", url];
    all.extend_from_slice(args);
    env.run(&all)
}

/// Takes and releases lock `name` through `url`; returns whether the
/// holder's session used TLS while it held (`t` or `f`).
fn acquire_release(c: &Cluster, env: &Env, url: &str, name: &str) -> String {
    let out = baton(env, url, &["lock", "acquire", name]);
    assert_eq!(code(&out), 0, "acquire via {url}: {}", stderr(&out));
    let token = stdout(&out).trim().to_string();
    let ssl = c.ssl_of("baton");
    let out = baton(env, url, &["lock", "status", name, "--json"]);
    assert_eq!(code(&out), 0, "status via {url}: {}", stderr(&out));
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["held"], true, "{st}");
    let out = baton(env, url, &["lock", "release", name, "--token", &token]);
    assert_eq!(code(&out), 0, "release via {url}: {}", stderr(&out));
    assert_eq!(ssl.len(), 1, "one holder session, got {ssl:?}");
    ssl[0].clone()
}

/// A failed connection: exit 125, one line on stderr, which names what
/// failed and hides the password. Returns the line.
fn refused(env: &Env, url: &str) -> String {
    let out = baton(env, url, &["lock", "acquire", "x", "--no-wait"]);
    let err = stderr(&out);
    assert_eq!(code(&out), 125, "via {url}: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(!err.contains("s3cret"), "password shown: {err}");
    err
}

#[test]
fn every_sslmode_against_a_server_with_tls() {
    let c = Cluster::start(true);
    let env = Env::new();
    let ca = c.ca.clone();
    let other = c.other_ca.clone();

    // Encrypted, certificate unchecked.
    let require = c.url("localhost", "sslmode=require");
    assert_eq!(acquire_release(&c, &env, &require, "r"), "t");
    // Chain and host name checked.
    let full = c.url("localhost", &c.verify("verify-full", &ca));
    assert_eq!(acquire_release(&c, &env, &full, "f"), "t");
    // A group run on the same backend.
    let ran = env.path("group.ran");
    let script = format!("echo ran > {}", ran.display());
    let out = baton(
        &env,
        &full,
        &["run", "--group", "g", "--", "sh", "-c", &script],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(ran.exists(), "the group's command did not run");
    // verify-ca checks the chain only: by address, with the right CA.
    let by_ip = c.url("127.0.0.1", &c.verify("verify-ca", &ca));
    assert_eq!(acquire_release(&c, &env, &by_ip, "a"), "t");
    // The default is prefer: TLS, since the server has it.
    assert_eq!(acquire_release(&c, &env, &c.url("localhost", ""), "p"), "t");
    assert_eq!(
        acquire_release(&c, &env, &c.url("localhost", "sslmode=disable"), "d"),
        "f"
    );

    // The host check: the certificate names only localhost.
    let wrong_host = format!(
        "postgres://postgres:s3cret@127.0.0.1:{}/postgres?{}",
        c.port,
        c.verify("verify-full", &ca)
    );
    let err = refused(&env, &wrong_host);
    assert!(
        err.contains("host name '127.0.0.1' does not match the server's certificate"),
        "{err}"
    );
    assert!(err.contains("it names localhost"), "{err}");
    // The CA check: another CA signed nothing the server has.
    for mode in ["verify-ca", "verify-full"] {
        let err = refused(&env, &c.url("localhost", &c.verify(mode, &other)));
        assert!(
            err.contains(&format!(
                "not signed by the CA in sslrootcert '{}'",
                other.display()
            )),
            "{err}"
        );
    }
    // require with an explicit root file checks the chain, as libpq does.
    let err = refused(&env, &c.url("localhost", &c.verify("require", &other)));
    assert!(err.contains("not signed by the CA in sslrootcert"), "{err}");
    // The system's roots (the default of verify-full) do not know the test CA.
    for params in ["sslmode=verify-full", "sslrootcert=system"] {
        let err = refused(&env, &c.url("localhost", params));
        assert!(err.contains("trusted root"), "{err}");
    }
    // A bad root file, and a weak mode with the system's roots.
    let err = refused(
        &env,
        &c.url(
            "localhost",
            "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
        ),
    );
    assert!(
        err.contains("cannot use sslrootcert '/nonexistent/ca.pem'"),
        "{err}"
    );
    let err = refused(
        &env,
        &c.url("localhost", "sslmode=require&sslrootcert=system"),
    );
    assert!(err.contains("sslrootcert=system"), "{err}");
    // No lock was left behind by any of it.
    assert_eq!(c.ssl_of("baton"), Vec::<String>::new());
}

#[test]
fn a_server_without_tls_is_refused_by_require_and_used_in_plain_by_prefer() {
    let c = Cluster::start(false);
    let env = Env::new();
    let err = refused(&env, &c.url("localhost", "sslmode=require"));
    assert!(err.contains("the server does not support TLS"), "{err}");
    assert!(err.contains("sslmode=require"), "{err}");
    // A detected downgrade (a proxy declining TLS) is never answered with
    // advice to weaken the mode (issue 37, item 8).
    assert!(!err.contains("prefer") && !err.contains("disable"), "{err}");
    let err = refused(&env, &c.url("localhost", &c.verify("verify-full", &c.ca)));
    assert!(err.contains("the server does not support TLS"), "{err}");
    assert_eq!(
        acquire_release(&c, &env, &c.url("localhost", "sslmode=prefer"), "p"),
        "f"
    );
    assert_eq!(acquire_release(&c, &env, &c.url("localhost", ""), "d"), "f");
}

#[test]
fn the_service_store_connects_with_tls() {
    let c = Cluster::start(true);
    let url = c.url("localhost", "sslmode=require");
    let s = Server::start(&sh_config(""), &["--store", &url]);
    let t = s.tmp();
    let id = s.submit(json!({"prompt": format!("echo done > {t}/job.ran")}));
    let j = s.wait_final(&id);
    assert_eq!(j["status"], "succeeded", "{j}");
    assert!(s.path("job.ran").exists());
    // Every session of the service (the pool and the node's own) uses TLS.
    let sessions: Vec<String> = c
        .query(
            "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()",
        )
        .into_iter()
        .map(|r| r[0].clone().unwrap_or_default())
        .collect();
    assert!(!sessions.is_empty(), "no session of the service");
    assert!(sessions.iter().all(|s| s == "t"), "{sessions:?}");
    drop(s);

    // A store whose certificate check fails does not start, and says why.
    let env = Env::new();
    let bad = c.url("localhost", &c.verify("verify-full", &c.other_ca));
    let out = env.run(&["serve", "--store", &bad, "--listen", "127.0.0.1:0"]);
    let err = stderr(&out);
    assert_eq!(code(&out), 125, "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(err.contains("not signed by the CA in sslrootcert"), "{err}");

    // A server without TLS: require refuses it.
    let plain = Cluster::start(false);
    let url = plain.url("localhost", "sslmode=require");
    let out = env.run(&["serve", "--store", &url, "--listen", "127.0.0.1:0"]);
    let err = stderr(&out);
    assert_eq!(code(&out), 125, "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(err.contains("the server does not support TLS"), "{err}");
}

/// A server whose certificate is its own CA (self-signed) under verify-ca:
/// one line in words, not the verifier's Debug text
/// ("Other(OtherError(CaUsedAsEndEntity))", issue 37, item 8).
#[test]
fn a_self_signed_server_certificate_is_named_in_words() {
    let c = Cluster::start(true);
    let env = Env::new();
    let dir = c.tmp.path();
    // The server's files become the CA's own (the command line names the
    // files, so they are replaced in place), then the server reloads them.
    std::fs::copy(&c.ca, dir.join("server.crt")).unwrap();
    std::fs::copy(dir.join("ca.key"), dir.join("server.key")).unwrap();
    c.query("SELECT pg_reload_conf()");
    let url = c.url("localhost", &c.verify("verify-ca", &c.ca));
    let deadline = Instant::now() + Duration::from_secs(30);
    let err = loop {
        let out = baton(&env, &url, &["lock", "acquire", "x", "--no-wait"]);
        let err = stderr(&out);
        if code(&out) == 125 {
            break err;
        }
        // The reload has not taken effect yet: the old certificate passed.
        assert!(
            Instant::now() < deadline,
            "the server kept its certificate: {err}"
        );
        let token = stdout(&out).trim().to_string();
        baton(&env, &url, &["lock", "release", "x", "--token", &token]);
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(err.contains("is a CA certificate"), "{err}");
    assert!(
        !err.contains("OtherError") && !err.contains("CaUsedAsEndEntity"),
        "{err}"
    );
}
