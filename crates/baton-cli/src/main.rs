//! The `baton` binary: everything is in the library part of this crate.
//!
//! Started without Rust's runtime start-up (`no_main`): `baton run` starts
//! once per locked command, and that start-up reads /proc/self/maps, about a
//! tenth of its instructions. `baton::main_without_runtime` does what baton
//! needs of it (closed standard descriptors, SIGPIPE, panics, stdout).
//! On Windows, which has neither, `baton` starts as any Rust program.
#![cfg_attr(all(unix, not(test)), no_main)] // a test build keeps the test harness's own main

/// The C entry point. Arguments and environment reach `std::env` as usual
/// (Rust's standard library reads them at load time on glibc).
#[cfg(all(unix, not(test)))]
#[no_mangle]
pub extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    libc::c_int::from(baton::main_without_runtime())
}

/// Windows: Rust's own start-up (it reads no /proc there).
#[cfg(all(windows, not(test)))]
fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(baton::main())
}
