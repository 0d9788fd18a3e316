//! What every group of flags shares, whichever layer owns the group (the
//! settings, capture): its defaults read from its own flag declarations, so a
//! default is written once, in `default_value_t`.

use clap::{Args, FromArgMatches};

/// A group's defaults, as its flags declare them.
pub fn clap_defaults<T: Args + FromArgMatches>() -> T {
    let command = T::augment_args(clap::Command::new("tfserve"));
    let parsed = command
        .try_get_matches_from(["tfserve"])
        .and_then(|matches| T::from_arg_matches(&matches));
    match parsed {
        Ok(defaults) => defaults,
        // Only a malformed `default_value_t` gets here; a unit test parses every group.
        Err(error) => panic!("the settings' defaults do not parse: {error}"),
    }
}
