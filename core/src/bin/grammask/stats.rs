//! Percentile summaries for timings.

use serde_json::{json, Value};

/// `{mean, p50, p90, p99, p999, max}` of `xs` (any unit).
pub fn summary(xs: &[f64]) -> Value {
    if xs.is_empty() {
        return json!({"mean": 0, "p50": 0, "p90": 0, "p99": 0, "p999": 0, "max": 0});
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let pct = |p: f64| v[((v.len() as f64 - 1.0) * p).round() as usize];
    let r = |x: f64| (x * 100.0).round() / 100.0;
    json!({
        "mean": r(v.iter().sum::<f64>() / v.len() as f64),
        "p50": r(pct(0.5)), "p90": r(pct(0.9)), "p99": r(pct(0.99)), "p999": r(pct(0.999)),
        "max": r(v[v.len() - 1]),
    })
}
