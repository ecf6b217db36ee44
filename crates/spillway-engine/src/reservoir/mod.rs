//! The event reservoir (in progress).
