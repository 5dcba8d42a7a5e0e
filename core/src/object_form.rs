//! Configuration records are read from objects only.
//!
//! serde's derived `Deserialize` also accepts a struct as a sequence of its fields in
//! declaration order, so `{"retry": [4, 500]}` would set the first two retry settings by
//! position: a configuration nobody means to write, which silently changes when a field is
//! added. [`objects_only!`](crate::objects_only) gives a record the derived reading of an
//! object (defaults, `deny_unknown_fields`, renames: whatever its `#[serde]` attributes say)
//! and refuses every other shape with an error naming what was expected.
//!
//! What `remote = "Self"` leaves behind: the derived readers stay inherent functions of the
//! record (`RetryConfig::deserialize`, `RetryConfig::serialize`, listed undocumented in its
//! rustdoc), and the inherent `deserialize` still takes an array. Read a record through the
//! `Deserialize` trait (`serde_json::from_str`, `from_value`), as every reader in rebound does.

/// Implements `Serialize` and `Deserialize` for a struct whose derives carry
/// `#[serde(remote = "Self")]`, so that it is read only from a map (a JSON object):
///
/// ```
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
/// #[serde(remote = "Self", default, deny_unknown_fields)]
/// struct Settings {
///     attempts: u32,
/// }
/// rebound_core::objects_only!(Settings, "an object of settings");
///
/// let read: Settings = serde_json::from_str(r#"{"attempts": 3}"#).unwrap();
/// assert_eq!(read, Settings { attempts: 3 });
/// let by_position = serde_json::from_str::<Settings>("[3]").unwrap_err();
/// assert!(by_position.to_string().contains("expected an object of settings"));
/// let typo = serde_json::from_str::<Settings>(r#"{"atempts": 3}"#).unwrap_err();
/// assert!(typo.to_string().contains("unknown field `atempts`"));
/// ```
#[macro_export]
macro_rules! objects_only {
    ($record:ty, $expected:literal) => {
        impl ::serde::Serialize for $record {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                <$record>::serialize(self, serializer)
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $record {
            fn deserialize<D: ::serde::Deserializer<'de>>(
                deserializer: D,
            ) -> Result<Self, D::Error> {
                struct Object;
                impl<'de> ::serde::de::Visitor<'de> for Object {
                    type Value = $record;
                    fn expecting(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                        f.write_str($expected)
                    }
                    fn visit_map<A: ::serde::de::MapAccess<'de>>(
                        self,
                        map: A,
                    ) -> Result<$record, A::Error> {
                        <$record>::deserialize(::serde::de::value::MapAccessDeserializer::new(map))
                    }
                }
                deserializer.deserialize_map(Object)
            }
        }
    };
}
