//! The payments generator, the demo's source: card and merchant ids drawn from YCSB's
//! scrambled zipfian, log-normal amounts rounded to cents, and event times in ms that
//! increase with exponential gaps at a given event-time rate.
//!
//! The generator is deterministic for a seed (it uses [`rand::rngs::StdRng`], whose
//! stream is fixed for a `rand` version on every platform), so it resumes by
//! regenerating and discarding the first `next_seq` events ([`PaymentGenerator::skip_to`]).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use spillway_zipf::ScrambledZipfian;

use super::{Source, SourceError, SourcePosition};
use crate::value::{DataType, Event, Field, Schema, TimeUnit, Value};

/// Parameters of the payments generator.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PaymentOptions {
    /// RNG seed.
    pub seed: u64,
    /// Number of events to generate.
    pub events: u64,
    /// Number of distinct cards (ids `0..cards`).
    pub cards: u64,
    /// Number of distinct merchants (ids `0..merchants`).
    pub merchants: u64,
    /// Zipfian skew in `(0, 1)`; `0` draws cards and merchants uniformly.
    pub zipf: f64,
    /// Event-time rate: mean events per second of event time.
    pub events_per_second: f64,
    /// Event time of the start, in ms.
    pub start_ms: i64,
}

impl Default for PaymentOptions {
    /// Seed 42, 1M events, 1M cards, 100k merchants, skew 0.99, 10k events/s from
    /// 2023-11-14T22:13:20Z (1_700_000_000_000 ms).
    fn default() -> PaymentOptions {
        PaymentOptions {
            seed: 42,
            events: 1_000_000,
            cards: 1_000_000,
            merchants: 100_000,
            zipf: 0.99,
            events_per_second: 10_000.0,
            start_ms: 1_700_000_000_000,
        }
    }
}

/// Draws ids in `0..n`: zipfian, or uniform for skew 0.
#[derive(Clone, Debug)]
enum Ids {
    Zipf(ScrambledZipfian),
    Uniform(u64),
}

impl Ids {
    fn sample(&self, rng: &mut StdRng) -> u64 {
        match self {
            Ids::Zipf(z) => z.sample(rng),
            Ids::Uniform(n) => rng.random_range(0..*n),
        }
    }
}

/// Median amount (exp of the log-normal's mu) and the log-normal's sigma.
const AMOUNT_MEDIAN: f64 = 25.0;
const AMOUNT_SIGMA: f64 = 1.0;

/// The payments generator: schema `card Int, merchant Int, amount Float, ts Int` (ts in
/// ms, the time column).
#[derive(Clone, Debug)]
pub struct PaymentGenerator {
    opts: PaymentOptions,
    schema: Schema,
    rng: StdRng,
    cards: Ids,
    merchants: Ids,
    /// Event time elapsed since `start_ms`, in fractional ms.
    elapsed_ms: f64,
    mean_gap_ms: f64,
    next_seq: u64,
}

impl PaymentGenerator {
    /// A generator (checks the options; building a zipfian over `n` ids takes time linear
    /// in `n`, ~20 ms per million).
    pub fn new(opts: PaymentOptions) -> Result<PaymentGenerator, SourceError> {
        let bad = |what: String| Err(SourceError::Options { message: what });
        if opts.cards == 0 || opts.merchants == 0 {
            return bad(format!(
                "the generator needs at least one card and one merchant (got {} cards, {} \
                 merchants)",
                opts.cards, opts.merchants
            ));
        }
        if !(opts.zipf == 0.0 || (opts.zipf > 0.0 && opts.zipf < 1.0)) {
            return bad(format!("zipf skew must be 0 (uniform) or in (0, 1), got {}", opts.zipf));
        }
        if !(opts.events_per_second.is_finite() && opts.events_per_second > 0.0) {
            return bad(format!(
                "events per second must be a positive number, got {}",
                opts.events_per_second
            ));
        }
        let ids = |n: u64| {
            if opts.zipf == 0.0 {
                Ids::Uniform(n)
            } else {
                Ids::Zipf(ScrambledZipfian::new(n, opts.zipf))
            }
        };
        let fields = vec![
            Field { name: "card".into(), ty: DataType::Int },
            Field { name: "merchant".into(), ty: DataType::Int },
            Field { name: "amount".into(), ty: DataType::Float },
            Field { name: "ts".into(), ty: DataType::Int },
        ];
        let schema = Schema::new(fields, "ts", TimeUnit::Ms)
            .map_err(|message| SourceError::Options { message })?;
        Ok(PaymentGenerator {
            schema,
            rng: StdRng::seed_from_u64(opts.seed),
            cards: ids(opts.cards),
            merchants: ids(opts.merchants),
            elapsed_ms: 0.0,
            mean_gap_ms: 1000.0 / opts.events_per_second,
            next_seq: 0,
            opts,
        })
    }

    /// The options.
    pub fn options(&self) -> &PaymentOptions {
        &self.opts
    }

    /// Advances so that the next event is number `seq` (regenerating and discarding the
    /// events before it; the generator cannot go back). Used to resume from a
    /// [`SourcePosition::next_seq`].
    pub fn skip_to(&mut self, seq: u64) {
        while self.next_seq < seq.min(self.opts.events) {
            self.generate();
        }
    }

    /// The next event, ignoring the event limit.
    fn generate(&mut self) -> Event {
        let card = self.cards.sample(&mut self.rng);
        let merchant = self.merchants.sample(&mut self.rng);
        // Log-normal amount via Box-Muller, rounded to cents, at least one cent.
        let u1: f64 = 1.0 - self.rng.random::<f64>(); // (0, 1]
        let u2: f64 = self.rng.random();
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        let amount = ((AMOUNT_MEDIAN * (AMOUNT_SIGMA * z).exp() * 100.0).round() / 100.0).max(0.01);
        // Exponential gap at the event-time rate; times are whole ms, ties allowed.
        let u3: f64 = 1.0 - self.rng.random::<f64>();
        self.elapsed_ms += -u3.ln() * self.mean_gap_ms;
        let ts = self.opts.start_ms.saturating_add(self.elapsed_ms as i64);
        let seq = self.next_seq;
        self.next_seq += 1;
        Event {
            time: ts,
            seq,
            row: vec![
                Value::Int(card as i64),
                Value::Int(merchant as i64),
                Value::Float(amount),
                Value::Int(ts),
            ],
        }
    }
}

impl Source for PaymentGenerator {
    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn next_event(&mut self) -> Result<Option<Event>, SourceError> {
        if self.next_seq >= self.opts.events {
            return Ok(None);
        }
        Ok(Some(self.generate()))
    }

    /// Only `next_seq` is meaningful (resume with [`PaymentGenerator::skip_to`]).
    fn position(&self) -> SourcePosition {
        SourcePosition { next_seq: self.next_seq, ..SourcePosition::default() }
    }

    fn skipped(&self) -> u64 {
        0
    }

    fn sync(&mut self) -> Result<(), SourceError> {
        Ok(())
    }
}

/// All `opts.events` events of a generator, in memory (for benchmarks).
pub fn generate_events(opts: PaymentOptions) -> Result<Vec<Event>, SourceError> {
    let mut g = PaymentGenerator::new(opts)?;
    let mut out = Vec::with_capacity(usize::try_from(g.opts.events).unwrap_or(0).min(1 << 28));
    while let Some(e) = g.next_event()? {
        out.push(e);
    }
    Ok(out)
}
