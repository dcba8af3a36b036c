//! The `baton` binary: everything is in the library part of this crate.
//!
//! Started without Rust's runtime start-up (`no_main`): `baton run` starts
//! once per locked command, and that start-up reads /proc/self/maps, about a
//! tenth of its instructions. `baton::main_without_runtime` does what baton
//! needs of it (closed standard descriptors, SIGPIPE, panics, stdout).
//! On Windows, which has neither, and with musl, whose C library does not
//! hand the arguments to the standard library at load time (only Rust's
//! start-up does there), `baton` starts as any Rust program, as
//! `baton-service` always does.
#![cfg_attr(all(unix, not(target_env = "musl"), not(test)), no_main)] // a test build keeps the test harness's own main
#![deny(unsafe_code)]

/// The C entry point. Arguments and environment reach `std::env` as usual
/// (Rust's standard library reads them at load time on glibc, and from the
/// system on macOS).
#[cfg(all(unix, not(target_env = "musl"), not(test)))]
// `no_mangle` (the C entry point must be named `main`) counts as unsafe
// code: no other symbol of the program is called `main`, as `no_main` says.
#[allow(unsafe_code)]
#[no_mangle]
pub extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    libc::c_int::from(baton::main_without_runtime())
}

/// Windows and musl: Rust's own start-up (it reads no /proc on Windows; with
/// musl it is what gives `std::env` the arguments).
#[cfg(all(any(windows, target_env = "musl"), not(test)))]
fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(baton::main())
}
