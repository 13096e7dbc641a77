//! `--synchronous` for the command lines that open a store (`tether serve`,
//! `tether bench turns`), behind the `cli` feature: one spelling of the
//! flag's values for both, where neither crate can import the other's.

use clap::builder::PossibleValue;
use clap::ValueEnum;

use crate::Synchronous;

/// By hand rather than derived, so that `--help` lists the bare values (the
/// flag's own help explains them) and this crate's doc comments stay free
/// to speak to its readers.
impl ValueEnum for Synchronous {
    fn value_variants<'a>() -> &'a [Self] {
        &[Synchronous::Normal, Synchronous::Full]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.as_str()))
    }
}
