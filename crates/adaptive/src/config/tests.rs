use super::*;
use proptest::prelude::*;

#[test]
fn the_defaults_check() {
    let d = Config::default();
    assert_eq!(d.check(), Ok(()));
    assert_eq!((d.min, d.max, d.initial), (4, 1000, 20));
    assert_eq!(d.unloaded_samples(), 5);
}

#[test]
fn bounds_take_the_default_start_clamped_into_them() {
    assert_eq!(Config::with_bounds(1, 10).map(|c| c.initial), Ok(10));
    assert_eq!(Config::with_bounds(30, 50).map(|c| c.initial), Ok(30));
    assert_eq!(Config::with_bounds(0, 10), Err(ConfigError::ZeroMin));
    assert_eq!(Config::with_bounds(10, 9), Err(ConfigError::MinAboveMax));
}

#[test]
fn each_bad_setting_has_its_error() {
    let d = Config::default();
    let cases = [
        (Config { initial: 2, ..d }, ConfigError::InitialOutOfBounds),
        (Config { min_window: 0, ..d }, ConfigError::Windows),
        (Config { max_window: 1, ..d }, ConfigError::Windows),
        (
            Config {
                min_samples: 0,
                ..d
            },
            ConfigError::ZeroSamples,
        ),
        (
            Config {
                smoothing: 0.0,
                ..d
            },
            ConfigError::Factor,
        ),
        (
            Config {
                smoothing: 1.5,
                ..d
            },
            ConfigError::Factor,
        ),
        (Config { backoff: 1.0, ..d }, ConfigError::Factor),
        (
            Config {
                failure_percent: 101,
                ..d
            },
            ConfigError::Factor,
        ),
    ];
    for (config, error) in cases {
        assert_eq!(config.check(), Err(error), "{config:?}");
        assert!(!error.to_string().is_empty());
    }
}

proptest! {
    #[test]
    fn normalized_settings_always_check(
        min in any::<u32>(), max in any::<u32>(), initial in any::<u32>(),
        min_window in any::<u64>(), max_window in any::<u64>(),
        min_samples in any::<u32>(), smoothing in any::<f64>(),
        failure_percent in any::<u32>(), backoff in any::<f64>(),
    ) {
        let c = Config {
            min, max, initial, min_window, max_window, min_samples, smoothing,
            failure_percent, backoff, probe_interval: 0,
        };
        prop_assert_eq!(c.normalized().check(), Ok(()));
        if c.check().is_ok() {
            prop_assert_eq!(c.normalized(), c);
        }
    }
}

#[test]
fn bounds_default_around_the_one_given() {
    let b = |min, max| {
        let b = Bounds::given(min, max);
        (b.min, b.max)
    };
    assert_eq!(b(None, None), (4, 1000));
    assert_eq!(b(None, Some(2)), (2, 2));
    assert_eq!(b(Some(2000), None), (2000, 2000));
    assert_eq!(b(Some(10), Some(50)), (10, 50));
    assert_eq!(b(Some(60), Some(50)), (60, 50), "the caller refuses it");
    assert!(Bounds::given(Some(60), Some(50)).config().is_none());
    assert_eq!(
        Bounds::given(Some(60), None).config().map(|c| c.initial),
        Some(60)
    );
}
