//! The bounded file reader (being written).
