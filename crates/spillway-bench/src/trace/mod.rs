//! State-access traces (in progress).
