//! Links the release `baton` binary on Linux as a position-dependent
//! executable (`-no-pie`).
//!
//! `baton` is started once per `baton run`. As a PIE, the dynamic loader
//! first applies its ~4,700 relative relocations (most of them in the
//! tables of rustls and ring, which `--backend postgres://` needs), about
//! 7% of the instructions of a `baton run --lock x -- true`
//! (bench/README.md, "Where the time goes"); at a fixed address there are
//! none. The cost: the binary's own code and data are not placed at a
//! random address (libraries, heap and stack still are). `baton-service`,
//! the long-running job service, stays a PIE.

fn main() {
    let linux = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux");
    let release = std::env::var("PROFILE").as_deref() == Ok("release");
    if linux && release {
        println!("cargo:rustc-link-arg-bin=baton=-no-pie");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
