//! Guest signals: numbers, descriptions and the default action.

/// A Linux signal number as the guest sees it (RV64 uses the generic numbers,
/// which match x86-64 hosts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Signal(u8);

impl Signal {
    /// SIGHUP.
    pub const HUP: Signal = Signal(1);
    /// SIGINT.
    pub const INT: Signal = Signal(2);
    /// SIGQUIT.
    pub const QUIT: Signal = Signal(3);
    /// SIGILL: illegal instruction.
    pub const ILL: Signal = Signal(4);
    /// SIGTRAP: breakpoint.
    pub const TRAP: Signal = Signal(5);
    /// SIGABRT: `abort()`.
    pub const ABRT: Signal = Signal(6);
    /// SIGBUS: misaligned atomic and similar bus errors.
    pub const BUS: Signal = Signal(7);
    /// SIGFPE.
    pub const FPE: Signal = Signal(8);
    /// SIGKILL.
    pub const KILL: Signal = Signal(9);
    /// SIGUSR1.
    pub const USR1: Signal = Signal(10);
    /// SIGSEGV: access to unmapped or protected memory.
    pub const SEGV: Signal = Signal(11);
    /// SIGUSR2.
    pub const USR2: Signal = Signal(12);
    /// SIGPIPE.
    pub const PIPE: Signal = Signal(13);
    /// SIGTERM.
    pub const TERM: Signal = Signal(15);
    /// A child process stopped or ended.
    pub const CHLD: Signal = Signal(17);

    /// The signal with this number, if it is a valid one (1..=64).
    pub fn from_number(number: u64) -> Option<Signal> {
        u8::try_from(number)
            .ok()
            .filter(|n| (1..=64).contains(n))
            .map(Signal)
    }

    /// The signal number.
    pub fn number(self) -> u8 {
        self.0
    }

    /// The description `strsignal` gives (what a shell or qemu prints).
    pub fn description(self) -> &'static str {
        match self.0 {
            1 => "Hangup",
            2 => "Interrupt",
            3 => "Quit",
            4 => "Illegal instruction",
            5 => "Trace/breakpoint trap",
            6 => "Aborted",
            7 => "Bus error",
            8 => "Floating point exception",
            9 => "Killed",
            10 => "User defined signal 1",
            11 => "Segmentation fault",
            12 => "User defined signal 2",
            13 => "Broken pipe",
            14 => "Alarm clock",
            15 => "Terminated",
            16 => "Stack fault",
            17 => "Child exited",
            18 => "Continued",
            19 => "Stopped (signal)",
            20 => "Stopped",
            21 => "Stopped (tty input)",
            22 => "Stopped (tty output)",
            23 => "Urgent I/O condition",
            24 => "CPU time limit exceeded",
            25 => "File size limit exceeded",
            26 => "Virtual timer expired",
            27 => "Profiling timer expired",
            28 => "Window changed",
            29 => "I/O possible",
            30 => "Power failure",
            31 => "Bad system call",
            _ => "Real-time signal",
        }
    }

    /// Whether the default action of this signal terminates the process
    /// (with or without a core dump). Ignored-by-default signals (SIGCHLD,
    /// SIGURG, SIGWINCH) and the stop/continue family do not.
    pub fn default_terminates(self) -> bool {
        !matches!(self.0, 17 | 18 | 19 | 20 | 21 | 22 | 23 | 28)
    }

    /// Whether the default action also dumps core (what a shell reports as
    /// "core dumped").
    pub fn dumps_core(self) -> bool {
        matches!(self.0, 3 | 4 | 5 | 6 | 7 | 8 | 11 | 24 | 25 | 31)
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.0, self.description())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_names() {
        assert_eq!(Signal::from_number(11), Some(Signal::SEGV));
        assert_eq!(Signal::from_number(0), None);
        assert_eq!(Signal::from_number(65), None);
        assert_eq!(Signal::SEGV.to_string(), "11 (Segmentation fault)");
        assert!(Signal::ABRT.dumps_core());
        assert!(!Signal::from_number(17).is_some_and(Signal::default_terminates));
        assert!(Signal::TERM.default_terminates() && !Signal::TERM.dumps_core());
    }
}
