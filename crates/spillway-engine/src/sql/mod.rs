//! SQL metrics (in progress).
