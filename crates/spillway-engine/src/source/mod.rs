//! Sources and sinks (in progress).
