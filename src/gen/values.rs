//! Plausible feature values and a score that depends on them.
//!
//! Each declared feature gets a distribution from its type and name ([`infer`]): country codes
//! and device types with a realistic skew, hours 0–23 peaking in the evening, counts that are
//! mostly small, ages in days, amounts log-normal, probabilities in [0, 1], ids from a pool,
//! booleans mostly false. The score is a logistic function of the features (each feature pulls
//! with a weight fixed by its name), so it moves when they do.

use crate::config::{Dist, FeatureType};

fn owned(vs: &[(&str, f64)]) -> Dist {
    Dist::Categorical(vs.iter().map(|(v, w)| (v.to_string(), *w)).collect())
}

const COUNTRIES: [(&str, f64); 6] = [
    ("ID", 0.40),
    ("SG", 0.20),
    ("TH", 0.15),
    ("VN", 0.10),
    ("MY", 0.10),
    ("PH", 0.05),
];
const DEVICES: [(&str, f64); 3] = [("mobile", 0.70), ("desktop", 0.22), ("tablet", 0.08)];
const PAYMENTS: [(&str, f64); 4] = [
    ("card", 0.5),
    ("wallet", 0.3),
    ("transfer", 0.15),
    ("cash", 0.05),
];
const LEVELS: [(&str, f64); 3] = [("low", 0.6), ("medium", 0.3), ("high", 0.1)];

/// Hourly traffic shape: quiet at night, peaks at noon and in the evening.
const HOURS: [f64; 24] = [
    2.0, 1.0, 0.6, 0.5, 0.5, 0.8, 1.5, 3.0, 4.5, 5.0, 5.2, 5.6, 6.5, 6.0, 5.2, 5.0, 5.2, 5.8, 6.8,
    7.5, 7.8, 7.0, 5.0, 3.2,
];

/// The distribution of a feature named `name` of type `ty`.
pub fn infer(name: &str, ty: FeatureType) -> Dist {
    let n = name.to_ascii_lowercase();
    let has = |w: &[&str]| w.iter().any(|x| n.contains(x));
    match ty {
        FeatureType::String => {
            if has(&["country", "nation", "region"]) {
                owned(&COUNTRIES)
            } else if has(&["device", "platform", "os"]) {
                owned(&DEVICES)
            } else if has(&["payment", "method", "channel"]) {
                owned(&PAYMENTS)
            } else if has(&["level", "tier", "segment", "category"]) {
                owned(&LEVELS)
            } else {
                let stem = n.trim_end_matches("_id").trim_end_matches("id");
                let prefix = stem.chars().next().unwrap_or('x');
                Dist::Id {
                    prefix: format!("{prefix}-"),
                    pool: 5000,
                }
            }
        }
        FeatureType::Int64 => {
            if has(&["hour"]) {
                Dist::IntWeights(HOURS.to_vec())
            } else if has(&["minute", "second"]) {
                Dist::IntUniform { min: 0, max: 59 }
            } else if has(&["weekday", "day_of_week", "dow"]) {
                Dist::IntUniform { min: 0, max: 6 }
            } else if has(&["age_days", "days", "tenure"]) {
                Dist::LogNormal {
                    mu: 5.5,
                    sigma: 1.0,
                }
            } else if has(&["age"]) {
                Dist::Normal {
                    mean: 35.0,
                    std: 10.0,
                }
            } else if has(&["num", "count", "txn", "qty", "quantity", "n_"]) {
                Dist::Count { mean: 3.0 }
            } else {
                Dist::Count { mean: 20.0 }
            }
        }
        FeatureType::Float64 => {
            if has(&["amount", "price", "value", "spend", "balance", "revenue"]) {
                Dist::LogNormal {
                    mu: 3.5,
                    sigma: 1.0,
                }
            } else if has(&["score", "risk", "prob", "rate", "ratio", "pct", "share"]) {
                Dist::Unit { power: 2.0 }
            } else if has(&["distance", "km", "duration"]) {
                Dist::LogNormal {
                    mu: 1.5,
                    sigma: 0.8,
                }
            } else {
                Dist::Normal {
                    mean: 50.0,
                    std: 15.0,
                }
            }
        }
        FeatureType::Boolean => Dist::Bool {
            p: if has(&["is_", "has_", "flag"]) {
                0.1
            } else {
                0.3
            },
        },
    }
}

/// A drawn value (before it becomes a protobuf `Value`).
#[derive(Debug, Clone, PartialEq)]
pub enum Drawn {
    /// A number (integers travel as whole doubles, like Python's Struct).
    Number(f64),
    /// A string.
    Str(String),
    /// A boolean.
    Bool(bool),
}

fn normal(rng: &mut fastrand::Rng) -> f64 {
    // Box–Muller; 1 - f64() is in (0, 1].
    let u = 1.0 - rng.f64();
    let v = rng.f64();
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

fn weighted(rng: &mut fastrand::Rng, weights: impl Iterator<Item = f64> + Clone) -> usize {
    let total: f64 = weights.clone().sum();
    let mut x = rng.f64() * total;
    let mut last = 0;
    for (i, w) in weights.enumerate() {
        if x < w {
            return i;
        }
        x -= w;
        last = i;
    }
    last
}

fn cents(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

impl Dist {
    /// Draws one value.
    pub fn draw(&self, rng: &mut fastrand::Rng) -> Drawn {
        match self {
            Dist::Categorical(vs) => {
                Drawn::Str(vs[weighted(rng, vs.iter().map(|v| v.1))].0.clone())
            }
            Dist::Id { prefix, pool } => {
                // Zipf-like: the square of a uniform favours low numbers.
                let u = rng.f64();
                let k = ((u * u) * f64::from(*pool)) as u32;
                Drawn::Str(format!("{prefix}{k:04}"))
            }
            Dist::IntWeights(w) => Drawn::Number(weighted(rng, w.iter().copied()) as f64),
            Dist::Count { mean } => {
                let p = 1.0 / (1.0 + mean);
                let u = 1.0 - rng.f64();
                Drawn::Number((u.ln() / (1.0 - p).ln()).floor().min(1e6))
            }
            Dist::LogNormal { mu, sigma } => Drawn::Number(cents((mu + sigma * normal(rng)).exp())),
            Dist::Unit { power } => Drawn::Number((rng.f64().powf(*power) * 1e4).round() / 1e4),
            Dist::Normal { mean, std } => Drawn::Number(cents(mean + std * normal(rng))),
            Dist::IntUniform { min, max } => Drawn::Number(rng.i64(*min..=*max) as f64),
            Dist::Bool { p } => Drawn::Bool(rng.f64() < *p),
        }
    }

    /// The distribution after a drift: numbers shift up (log-normal amounts ×e, others by a
    /// spread), categories and booleans flip their skew.
    pub fn drifted(&self) -> Dist {
        match self {
            Dist::Categorical(vs) => {
                let mut w: Vec<f64> = vs.iter().map(|v| v.1).collect();
                w.reverse();
                Dist::Categorical(vs.iter().zip(w).map(|(v, w)| (v.0.clone(), w)).collect())
            }
            Dist::Id { prefix, pool } => Dist::Id {
                prefix: prefix.clone(),
                pool: pool / 10 + 1,
            },
            Dist::IntWeights(w) => {
                let mut w = w.clone();
                let by = w.len() / 3;
                w.rotate_right(by);
                Dist::IntWeights(w)
            }
            Dist::Count { mean } => Dist::Count { mean: mean * 3.0 },
            Dist::LogNormal { mu, sigma } => Dist::LogNormal {
                mu: mu + 1.0,
                sigma: *sigma,
            },
            Dist::Unit { power } => Dist::Unit { power: 1.0 / power },
            Dist::Normal { mean, std } => Dist::Normal {
                mean: mean + 2.0 * std,
                std: *std,
            },
            Dist::IntUniform { min, max } => Dist::IntUniform {
                min: *min,
                max: min + (max - min) / 2,
            },
            Dist::Bool { p } => Dist::Bool { p: 1.0 - p },
        }
    }

    /// The value's pull on the score, about in [-1, 1] for the usual draws.
    pub fn signal(&self, d: &Drawn) -> f64 {
        match (self, d) {
            (Dist::LogNormal { .. }, Drawn::Number(x)) => ((x.max(0.01)).ln() - 3.5) / 2.0,
            (Dist::Unit { .. }, Drawn::Number(x)) => 2.0 * x - 0.5,
            (Dist::Normal { mean, std }, Drawn::Number(x)) => (x - mean) / (2.0 * std),
            (Dist::Count { mean }, Drawn::Number(x)) => (x - mean) / (2.0 * mean + 1.0),
            (Dist::IntWeights(w), Drawn::Number(x)) => {
                // Night hours (or the tail of any weighted range) are the risky ones.
                let i = *x as usize;
                if i < w.len() / 4 {
                    1.0
                } else {
                    -0.2
                }
            }
            (Dist::IntUniform { min, max }, Drawn::Number(x)) => {
                (x - *min as f64) / ((max - min).max(1) as f64) - 0.5
            }
            (Dist::Bool { .. }, Drawn::Bool(b)) => {
                if *b {
                    1.0
                } else {
                    -0.1
                }
            }
            (Dist::Categorical(vs), Drawn::Str(s)) => {
                // The rarer the category, the more it pulls.
                vs.iter().find(|v| v.0 == *s).map_or(0.0, |v| {
                    0.5 - v.1 / vs.iter().map(|v| v.1).sum::<f64>().max(f64::MIN_POSITIVE)
                })
            }
            _ => 0.0,
        }
    }
}

/// A feature's weight in the score, fixed by its name (FNV-1a into [-1, 1]).
pub fn weight(name: &str) -> f64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    (h >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
}

/// The logistic function.
pub fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draws(d: &Dist, n: usize) -> Vec<Drawn> {
        let mut rng = fastrand::Rng::with_seed(7);
        (0..n).map(|_| d.draw(&mut rng)).collect()
    }

    fn numbers(v: &[Drawn]) -> Vec<f64> {
        v.iter()
            .map(|d| match d {
                Drawn::Number(x) => *x,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn names_give_plausible_values() {
        let hours = numbers(&draws(&infer("hour_of_day", FeatureType::Int64), 2000));
        assert!(hours
            .iter()
            .all(|h| (0.0..=23.0).contains(h) && h.fract() == 0.0));
        let countries = draws(&infer("country", FeatureType::String), 2000);
        let id = countries
            .iter()
            .filter(|d| **d == Drawn::Str("ID".into()))
            .count();
        assert!(id > 600 && id < 1000, "ID is the most common: {id}");
        assert!(countries
            .iter()
            .all(|d| matches!(d, Drawn::Str(s) if COUNTRIES.iter().any(|c| c.0 == s))));
        let amounts = numbers(&draws(&infer("amount", FeatureType::Float64), 2000));
        assert!(amounts.iter().all(|a| *a >= 0.0));
        let mut sorted = amounts.clone();
        sorted.sort_by(f64::total_cmp);
        let (median, mean) = (sorted[1000], amounts.iter().sum::<f64>() / 2000.0);
        assert!(
            mean > median,
            "log-normal: right-skewed ({mean} vs {median})"
        );
        let foreign = draws(&infer("is_foreign", FeatureType::Boolean), 2000);
        let t = foreign.iter().filter(|d| **d == Drawn::Bool(true)).count();
        assert!(t > 100 && t < 300, "mostly false: {t}");
        let devices = draws(&infer("device_type", FeatureType::String), 100);
        assert!(devices
            .iter()
            .all(|d| matches!(d, Drawn::Str(s) if DEVICES.iter().any(|c| c.0 == s))));
    }

    #[test]
    fn drift_moves_the_distribution() {
        let d = infer("amount", FeatureType::Float64);
        let before: f64 = numbers(&draws(&d, 2000)).iter().sum();
        let after: f64 = numbers(&draws(&d.drifted(), 2000)).iter().sum();
        assert!(after > 2.0 * before, "{before} → {after}");
        let c = infer("country", FeatureType::String);
        let ph = |v: Vec<Drawn>| v.iter().filter(|d| **d == Drawn::Str("PH".into())).count();
        assert!(ph(draws(&c.drifted(), 2000)) > 4 * ph(draws(&c, 2000)));
    }

    #[test]
    fn weights_are_fixed_by_name_and_in_range() {
        for n in ["amount", "country", "x", ""] {
            assert_eq!(weight(n), weight(n));
            assert!((-1.0..=1.0).contains(&weight(n)));
        }
        assert_ne!(weight("amount"), weight("country"));
    }
}
