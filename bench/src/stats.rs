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

/// A distribution-free 95 % confidence interval for the median: the order
/// statistics `x(k)` and `x(n+1-k)` with the largest `k` such that
/// P(Binomial(n, 1/2) < k) <= 2.5 %. Below 6 samples no such `k` exists;
/// then it is (min, max), whose coverage is 1 − 2^(1−n).
pub fn median_ci95(xs: &[f64]) -> (f64, f64) {
    let v = sorted(xs);
    let n = v.len();
    if n == 0 {
        return (f64::NAN, f64::NAN);
    }
    // P(X = i) for X ~ Binomial(n, 1/2), accumulated from i = 0.
    let mut p = 0.5f64.powi(n as i32);
    let mut cdf = 0.0;
    let mut k = 0;
    for i in 0..n {
        cdf += p;
        if cdf > 0.025 {
            break;
        }
        // P(X <= i) <= 2.5 %: x(i+1) is a valid lower bound.
        k = i + 1;
        p *= (n - i) as f64 / (i + 1) as f64;
    }
    if k == 0 {
        return (v[0], v[n - 1]);
    }
    (v[k - 1], v[n - k])
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

    #[test]
    fn median_confidence_interval() {
        // Known values: n=20 -> x(6)..x(15); n=30 -> x(10)..x(21); n=8 -> x(1)..x(8).
        let xs = |n: usize| (1..=n).map(|i| i as f64).collect::<Vec<_>>();
        assert_eq!(median_ci95(&xs(20)), (6.0, 15.0));
        assert_eq!(median_ci95(&xs(30)), (10.0, 21.0));
        assert_eq!(median_ci95(&xs(8)), (1.0, 8.0));
        assert_eq!(median_ci95(&xs(3)), (1.0, 3.0));
        assert!(median_ci95(&[]).0.is_nan());
    }
}
