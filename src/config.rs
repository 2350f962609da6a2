//! The pool config (`pool.yaml`): being written.
