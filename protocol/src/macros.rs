//! `wire_enum!`: a closed set of string values on the wire.
//!
//! Statuses, roles and event types are stored in the database and matched
//! on by clients as strings, so each needs serde, `as_str` (to store it),
//! `parse` (to read it back) and an `ALL` list (for exhaustive tests). One
//! macro keeps the serde names and `as_str` from ever drifting apart.

/// Declares a `Copy` enum whose variants map to fixed wire strings.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum $name {
            $( $(#[$vmeta])* #[serde(rename = $wire)] $variant ),+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[ $( $name::$variant ),+ ];

            /// The wire string.
            pub fn as_str(&self) -> &'static str {
                match self {
                    $( $name::$variant => $wire ),+
                }
            }

            /// The variant for a wire string, `None` for anything else.
            // Named like `FromStr::from_str`'s sibling on purpose: callers
            // that only want an Option need not name the error type.
            #[allow(clippy::should_implement_trait)]
            pub fn parse(s: &str) -> Option<Self> {
                match s {
                    $( $wire => Some($name::$variant), )+
                    _ => None,
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::error::UnknownValue;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::parse(s).ok_or_else(|| $crate::error::UnknownValue {
                    kind: stringify!($name),
                    value: s.to_owned(),
                })
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
