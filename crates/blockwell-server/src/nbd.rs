//! The NBD server (being written).
