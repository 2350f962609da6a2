//! Reading one upstream attempt into exactly one class: the protocol fields of a
//! failure (`failure`), errors reported inside a 2xx (`in_band`), the provider's
//! retry hints (`hint`), whose conventions a provider follows (`dialect`), and the
//! classifier itself (`classifier`). Pure: no I/O, no clock but the `now` it is given.
//!
//! Imports: `core` only.

pub mod classifier;
pub mod codes;
pub mod dialect;
pub mod evidence;
pub mod failure;
pub mod hint;
pub mod in_band;
pub mod shared;
