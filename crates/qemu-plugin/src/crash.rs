//! A C plugin's crash cannot be caught like a Rust panic. When one of the
//! synchronous fatal signals (or `abort()`'s SIGABRT) arrives while a
//! plugin's code runs on the faulting thread, the handler says which
//! plugin it was, runs the embedder's last words (the CLI completes its
//! trace), and lets the signal kill the process as it would have. Signals
//! raised anywhere else go to the handler that was there before (Rust's
//! stack-overflow report, say), untouched.

use std::sync::OnceLock;

use crate::plugin::CPlugin;

/// The signals a crash in plugin code raises.
const SIGNALS: [libc::c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
];

/// What the embedder wants done before the process dies.
static LAST_WORDS: OnceLock<Box<dyn Fn() + Send + Sync>> = OnceLock::new();

/// The dispositions replaced, by position in [`SIGNALS`].
static PREVIOUS: OnceLock<[libc::sigaction; 5]> = OnceLock::new();

/// Size of the alternate signal stack the handler runs on (a crash may be
/// a stack overflow in plugin code).
const ALT_STACK: usize = 64 * 1024;

/// Installs the crash handlers (once per process; later calls do nothing):
/// a crash in a C plugin's code prints `tcgkit: plugin NAME crashed
/// (SIGNAL)` on stderr, runs `last_words`, then the process dies by that
/// signal.
pub fn report_crashes(last_words: impl Fn() + Send + Sync + 'static) {
    if LAST_WORDS.set(Box::new(last_words)).is_err() {
        return;
    }
    // SAFETY: installing signal handlers with sigaction, with zeroed
    // structures filled as the manual says; the previous dispositions are
    // kept for signals that do not come from plugin code.
    unsafe {
        let mut previous: [libc::sigaction; 5] = std::mem::zeroed();
        let stack = libc::stack_t {
            ss_sp: Box::leak(vec![0u8; ALT_STACK].into_boxed_slice())
                .as_mut_ptr()
                .cast(),
            ss_flags: 0,
            ss_size: ALT_STACK,
        };
        libc::sigaltstack(&stack, std::ptr::null_mut());
        for (i, &signal) in SIGNALS.iter().enumerate() {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_fatal_signal as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, &mut previous[i]);
        }
        let _ = PREVIOUS.set(previous);
    }
}

fn signal_name(signal: libc::c_int) -> &'static str {
    match signal {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        _ => "SIGABRT",
    }
}

/// Writes `bytes` to stderr with `write(2)`, which a signal handler may call.
fn say(bytes: &[u8]) {
    // SAFETY: write(2) on fd 2 from a valid buffer.
    unsafe {
        libc::write(2, bytes.as_ptr().cast(), bytes.len());
    }
}

extern "C" fn on_fatal_signal(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    let at = SIGNALS.iter().position(|&s| s == signal).unwrap_or(0);
    let plugin = CPlugin::current_name();
    if let Some(name) = plugin {
        say(b"tcgkit: plugin ");
        say(name.as_bytes());
        say(b" crashed (");
        say(signal_name(signal).as_bytes());
        say(b")\n");
        if let Some(last_words) = LAST_WORDS.get() {
            last_words();
        }
    }
    // SAFETY: restores the disposition in force before ours (the default
    // one, or Rust's), so that returning re-runs the faulting instruction
    // into it, or re-raising delivers to it, as if we had not been here.
    unsafe {
        match PREVIOUS.get() {
            Some(previous) if plugin.is_none() => {
                let previous = &previous[at];
                let handler = previous.sa_sigaction;
                if handler != libc::SIG_DFL && handler != libc::SIG_IGN {
                    if previous.sa_flags & libc::SA_SIGINFO != 0 {
                        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                            std::mem::transmute(handler);
                        f(signal, info, context);
                    } else {
                        let f: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
                        f(signal);
                    }
                    return;
                }
                libc::sigaction(signal, previous, std::ptr::null_mut());
            }
            _ => {
                libc::signal(signal, libc::SIG_DFL);
            }
        }
        if signal == libc::SIGABRT {
            libc::raise(signal);
        }
    }
}
