//! Test helpers of the hostile-input tests: damage applied to a valid encoding, and any
//! [`Value`], so that each decoder's proptest reaches past its first check with bytes a
//! crash, a bit flip or another program can leave.

use proptest::prelude::*;

use crate::value::Value;

/// `valid` with the byte at `at` (modulo its length) set to `byte`.
pub(crate) fn flipped(valid: &[u8], at: usize, byte: u8) -> Vec<u8> {
    let mut bad = valid.to_vec();
    let i = at % bad.len();
    bad[i] = byte;
    bad
}

/// Any value of any type (strings of up to `max_chars` characters).
pub(crate) fn any_value(max_chars: usize) -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<i64>().prop_map(Value::Int),
        any::<f64>().prop_map(Value::Float),
        proptest::string::string_regex(&format!(".{{0,{max_chars}}}"))
            .expect("a regex")
            .prop_map(|s| Value::Str(s.into())),
        any::<bool>().prop_map(Value::Bool),
    ]
}
