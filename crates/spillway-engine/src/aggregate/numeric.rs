//! The invertible, fixed-size states: COUNT(x), SUM/AVG over ints (exact i128) and floats
//! (compensated), VAR_SAMP/STDDEV_SAMP (shifted data, compensated). Each op reads the old
//! fields, adjusts them and writes the new ones: O(1), no allocation.

use super::codec::{put_f64, put_i128, put_u64, Reader};
use super::AggStateError;
use crate::value::Value;

/// A Neumaier (Kahan-Babuska) compensated sum: `s + c` is the running total, `c` collects
/// the low-order bits that `s` lost.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct KSum {
    pub(crate) s: f64,
    pub(crate) c: f64,
}

impl KSum {
    #[inline]
    pub(crate) fn add(&mut self, x: f64) {
        let t = self.s + x;
        if self.s.abs() >= x.abs() {
            self.c += (self.s - t) + x;
        } else {
            self.c += (x - t) + self.s;
        }
        self.s = t;
    }

    #[inline]
    pub(crate) fn value(self) -> f64 {
        self.s + self.c
    }

    #[inline]
    fn read(r: &mut Reader<'_>) -> Result<KSum, AggStateError> {
        Ok(KSum { s: r.f64()?, c: r.f64()? })
    }

    #[inline]
    fn write(self, out: &mut Vec<u8>) {
        put_f64(out, self.s);
        put_f64(out, self.c);
    }
}

fn underflow(r: &Reader<'_>, at: usize) -> AggStateError {
    AggStateError::Corrupt {
        agg: r.agg,
        offset: at,
        what: "a count that is already 0 while removing a value",
    }
}

/// `COUNT(x)`: `[n u64]`.
#[inline]
pub(crate) fn count_step(
    r: &mut Reader<'_>,
    out: &mut Vec<u8>,
    present: bool,
    delta: i8,
) -> Result<(), AggStateError> {
    let at = r.pos();
    let n = r.u64()?;
    let n = if !present {
        n
    } else if delta > 0 {
        n.wrapping_add(1)
    } else {
        n.checked_sub(1).ok_or_else(|| underflow(r, at))?
    };
    put_u64(out, n);
    Ok(())
}

/// `SUM/AVG` over ints: `[sum i128][n u64]`; exact.
#[inline]
pub(crate) fn sum_int_step(
    r: &mut Reader<'_>,
    out: &mut Vec<u8>,
    x: Option<i64>,
    delta: i8,
) -> Result<(), AggStateError> {
    let at = r.pos();
    let mut sum = r.i128()?;
    let mut n = r.u64()?;
    if let Some(x) = x {
        if delta > 0 {
            sum = sum.wrapping_add(i128::from(x));
            n = n.wrapping_add(1);
        } else {
            sum = sum.wrapping_sub(i128::from(x));
            n = n.checked_sub(1).ok_or_else(|| underflow(r, at))?;
        }
    }
    put_i128(out, sum);
    put_u64(out, n);
    Ok(())
}

/// Result of an int SUM (`avg == false`) or AVG.
#[inline]
pub(crate) fn sum_int_result(r: &mut Reader<'_>, avg: bool) -> Result<Value, AggStateError> {
    let sum = r.i128()?;
    let n = r.u64()?;
    Ok(if n == 0 {
        Value::Null
    } else if avg {
        Value::Float(sum as f64 / n as f64)
    } else {
        match i64::try_from(sum) {
            Ok(v) => Value::Int(v),
            Err(_) => Value::Float(sum as f64),
        }
    })
}

/// The non-finite census shared by float SUM/AVG: NaNs and infinities do not enter the
/// compensated sum (they would poison it forever); they are counted instead.
#[derive(Clone, Copy, Debug, Default)]
struct NonFinite {
    nan: u64,
    pos_inf: u64,
    neg_inf: u64,
}

impl NonFinite {
    /// Saturating: a corrupt state's counts may add past u64::MAX (a valid one's add up
    /// to at most `n`).
    fn total(&self) -> u64 {
        self.nan.saturating_add(self.pos_inf).saturating_add(self.neg_inf)
    }

    fn slot(&mut self, x: f64) -> &mut u64 {
        if x.is_nan() {
            &mut self.nan
        } else if x > 0.0 {
            &mut self.pos_inf
        } else {
            &mut self.neg_inf
        }
    }

    /// The sum's value given its finite part.
    fn combine(&self, finite: f64) -> f64 {
        if self.nan > 0 || (self.pos_inf > 0 && self.neg_inf > 0) {
            f64::NAN
        } else if self.pos_inf > 0 {
            f64::INFINITY
        } else if self.neg_inf > 0 {
            f64::NEG_INFINITY
        } else {
            finite
        }
    }
}

/// `SUM/AVG` over floats: `[n u64][s f64][c f64][nan u64][+inf u64][-inf u64]` (48 bytes).
#[inline]
pub(crate) fn sum_float_step(
    r: &mut Reader<'_>,
    out: &mut Vec<u8>,
    x: Option<f64>,
    delta: i8,
) -> Result<(), AggStateError> {
    let at = r.pos();
    let mut n = r.u64()?;
    let mut sum = KSum::read(r)?;
    let mut nf = NonFinite { nan: r.u64()?, pos_inf: r.u64()?, neg_inf: r.u64()? };
    if let Some(x) = x {
        if delta > 0 {
            n = n.wrapping_add(1);
            if x.is_finite() {
                sum.add(x);
            } else {
                *nf.slot(x) = nf.slot(x).wrapping_add(1);
            }
        } else {
            n = n.checked_sub(1).ok_or_else(|| underflow(r, at))?;
            if x.is_finite() {
                sum.add(-x);
            } else {
                let slot = nf.slot(x);
                *slot = slot.checked_sub(1).ok_or_else(|| underflow(r, at))?;
            }
        }
        if n.saturating_sub(nf.total()) == 0 {
            // No finite values left: reset exactly so an emptied window shows no drift.
            sum = KSum::default();
        }
    }
    put_u64(out, n);
    sum.write(out);
    put_u64(out, nf.nan);
    put_u64(out, nf.pos_inf);
    put_u64(out, nf.neg_inf);
    Ok(())
}

/// Result of a float SUM (`avg == false`) or AVG.
#[inline]
pub(crate) fn sum_float_result(r: &mut Reader<'_>, avg: bool) -> Result<Value, AggStateError> {
    let n = r.u64()?;
    let sum = KSum::read(r)?;
    let nf = NonFinite { nan: r.u64()?, pos_inf: r.u64()?, neg_inf: r.u64()? };
    if n == 0 {
        return Ok(Value::Null);
    }
    let total = nf.combine(sum.value());
    Ok(Value::Float(if avg { total / n as f64 } else { total }))
}

/// `VAR_SAMP/STDDEV_SAMP`: `[n u64][non-finite u64][K f64][s1 KSum][s2 KSum]` (56 bytes),
/// where `s1 = Σ(x-K)`, `s2 = Σ(x-K)²` over the finite values and `K` is the first finite
/// value inserted while the state held none.
pub(crate) fn var_step(
    r: &mut Reader<'_>,
    out: &mut Vec<u8>,
    x: Option<f64>,
    delta: i8,
) -> Result<(), AggStateError> {
    let at = r.pos();
    let mut n = r.u64()?;
    let mut nonfinite = r.u64()?;
    let mut k = r.f64()?;
    let mut s1 = KSum::read(r)?;
    let mut s2 = KSum::read(r)?;
    if let Some(x) = x {
        let finite_before = n.saturating_sub(nonfinite);
        if delta > 0 {
            n = n.wrapping_add(1);
            if x.is_finite() {
                if finite_before == 0 {
                    k = x;
                    s1 = KSum::default();
                    s2 = KSum::default();
                }
                let d = x - k;
                s1.add(d);
                s2.add(d * d);
            } else {
                nonfinite = nonfinite.wrapping_add(1);
            }
        } else {
            n = n.checked_sub(1).ok_or_else(|| underflow(r, at))?;
            if x.is_finite() {
                let d = x - k;
                s1.add(-d);
                s2.add(-(d * d));
            } else {
                nonfinite = nonfinite.checked_sub(1).ok_or_else(|| underflow(r, at))?;
            }
        }
        if n.saturating_sub(nonfinite) == 0 {
            k = 0.0;
            s1 = KSum::default();
            s2 = KSum::default();
        }
    }
    put_u64(out, n);
    put_u64(out, nonfinite);
    put_f64(out, k);
    s1.write(out);
    s2.write(out);
    Ok(())
}

/// Result of VAR_SAMP (`sqrt == false`) or STDDEV_SAMP.
pub(crate) fn var_result(r: &mut Reader<'_>, sqrt: bool) -> Result<Value, AggStateError> {
    let n = r.u64()?;
    let nonfinite = r.u64()?;
    let _k = r.f64()?;
    let s1 = KSum::read(r)?.value();
    let s2 = KSum::read(r)?.value();
    if n < 2 {
        return Ok(Value::Null);
    }
    if nonfinite > 0 {
        return Ok(Value::Float(f64::NAN));
    }
    let nf = n as f64;
    let var = (s2 - s1 * s1 / nf) / (nf - 1.0);
    // Rounding can leave a tiny negative value where the true variance is 0.
    let var = if var < 0.0 { 0.0 } else { var };
    Ok(Value::Float(if sqrt { var.sqrt() } else { var }))
}
