//! `max:auto`'s parameters: `max` as given, and the learned max's bounds
//! (`max-min`, `max-max`), checked together once every item is read.

use adaptive::Bounds;

use super::{invalid, number, Location};

/// `max` as given.
#[derive(Clone, Copy)]
pub(super) enum Max {
    Fixed(u32),
    Auto,
}

/// `max:auto`'s bounds, checked: `max-min` and `max-max` only with it,
/// the lower not above the higher. The max to start from, and the bounds.
pub(super) fn learned(
    max: Max,
    min: Option<u32>,
    highest: Option<u32>,
) -> Result<(u32, Option<Bounds>), String> {
    let n = match max {
        Max::Fixed(n) => n,
        Max::Auto => {
            let b = Bounds::given(min, highest);
            return match b.config() {
                Some(c) => Ok((c.initial, Some(b))),
                None => Err(format!(
                    "parameter 'max-min' ({}) is above 'max-max' ({}): the lowest learned max \
                     must not exceed the highest",
                    b.min, b.max
                )),
            };
        }
    };
    let name = match (min, highest) {
        (None, None) => return Ok((n, None)),
        (Some(_), _) => "max-min",
        (None, Some(_)) => "max-max",
    };
    Err(format!(
        "parameter '{name}' needs max:auto (it bounds the learned max; this rule's max is {n})"
    ))
}

/// A bound of the learned max: 1 to [`Bounds::HIGHEST`].
pub(super) fn bound(name: &str, v: &str, at: &Location) -> Result<u32, String> {
    match number(name, v, at, "a whole number") {
        Ok(n) if (1..=Bounds::HIGHEST).contains(&n) => Ok(n),
        Ok(_) => Err(invalid(
            name,
            v,
            at,
            &format!("expected a whole number from 1 to {}", Bounds::HIGHEST),
        )),
        Err(e) => Err(e),
    }
}
