//! Admission (seed 004): our side of the wire. One bucket's arithmetic (`bucket`), the
//! buckets of one pool in this process (`buckets`), the local queue where requests no
//! route could admit wait (`queue`), and the maths of `poolctl capacity` (`capacity`).
//! "Why was this request shed?" is answered here alone.
//!
//! Imports: `core`, `classify` (the provider's remaining-quota headers).

pub mod bucket;
pub mod buckets;
pub mod capacity;
pub mod queue;
