//! The process's machinery that every part shares and no decision names: the keyed work queue and its fair order,
//! the fence every side effect passes, the log format, the crash points, the panic policy, and
//! the record of work that keeps failing. It imports nothing of the process above it.

pub mod crash_point;
pub mod failing;
pub mod fair;
pub mod fence;
pub mod logs;
pub mod panics;
pub mod queue;
