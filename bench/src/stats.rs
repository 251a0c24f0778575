//! Order statistics over small samples (a handful of rounds, a few hundred
//! queue waits): sorting is cheap and exact.

/// Sorted copy without NaNs.
fn sorted(xs: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// Median (mean of the two middle values for an even count); NaN if empty.
pub fn median(xs: &[f64]) -> f64 {
    let v = sorted(xs);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Nearest-rank percentile `p` (0–100); NaN if empty.
pub fn percentile(xs: &[f64], p: f64) -> f64 {
    let v = sorted(xs);
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

pub fn min(xs: &[f64]) -> f64 {
    sorted(xs).first().copied().unwrap_or(f64::NAN)
}

pub fn max(xs: &[f64]) -> f64 {
    sorted(xs).last().copied().unwrap_or(f64::NAN)
}

/// Element-wise ratios `a[i] / b[i]`, for per-round comparisons.
pub fn ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x / y).collect()
}

/// Element-wise differences `a[i] - b[i]`.
pub fn diffs(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x - y).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_statistics() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&xs, 50.0), 50.0);
        assert_eq!(percentile(&xs, 99.0), 99.0);
        assert_eq!(percentile(&xs, 100.0), 100.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert_eq!((min(&xs), max(&xs)), (1.0, 100.0));
        assert_eq!(ratios(&[2.0, 9.0], &[1.0, 3.0]), [2.0, 3.0]);
        assert_eq!(diffs(&[2.0, 9.0], &[1.0, 3.0]), [1.0, 6.0]);
    }
}
