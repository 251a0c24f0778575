//! The sieve against a reference model: one Vec per bucket, linear search.

use super::*;

/// The reference: one Vec per bucket, most recent first, linear search.
struct Model {
    params: SieveParams,
    caps: Vec<usize>,
    buckets: Vec<Vec<(u64, u32, u64)>>,
}

impl Model {
    fn new(params: SieveParams) -> Model {
        let params = params.normalized();
        let caps = (0..=params.buckets)
            .map(|b| params.bucket_size(b))
            .collect();
        Model {
            params,
            caps,
            buckets: vec![Vec::new(); usize::from(params.buckets) + 1],
        }
    }

    fn take(&mut self, key: u64) -> Option<(usize, (u64, u32, u64))> {
        for (b, list) in self.buckets.iter_mut().enumerate() {
            if let Some(i) = list.iter().position(|e| e.0 == key) {
                return Some((b, list.remove(i)));
            }
        }
        None
    }

    fn make_room(&mut self, b: usize) {
        if self.buckets[b].len() >= self.caps[b] {
            self.buckets[b].pop();
        }
    }

    fn increment(&mut self, key: u64, now: u64) -> Hit {
        let n = usize::from(self.params.buckets);
        let at = match self.take(key) {
            None => {
                self.make_room(n);
                self.buckets[n].insert(0, (key, 1, now));
                n
            }
            Some((b, mut e)) => {
                let max_age = if b == 0 {
                    self.params.perma.and_then(|p| p.max_age)
                } else {
                    self.params.max_age
                };
                if max_age.is_some_and(|a| now - e.2 > a) {
                    e.1 >>= 3;
                    e.2 = now;
                    self.make_room(n);
                    self.buckets[n].insert(0, e);
                    n
                } else {
                    e.1 = e.1.saturating_add(1);
                    if b >= 2 {
                        let up = b - 1;
                        if self.buckets[up].len() < self.caps[up] {
                            self.buckets[up].insert(0, e);
                            up
                        } else if self.buckets[up].last().is_some_and(|t| t.1 <= e.1) {
                            let t = self.buckets[up].pop().unwrap();
                            self.buckets[up].insert(0, e);
                            self.buckets[b].insert(0, t);
                            up
                        } else {
                            self.buckets[b].insert(0, e);
                            b
                        }
                    } else {
                        self.buckets[b].insert(0, e);
                        b
                    }
                }
            }
        };
        let e = self.buckets[at][0];
        if let Some(p) = self.params.perma {
            if e.1 > p.limit && at >= 1 && at <= usize::from(p.threshold) {
                self.buckets[at].remove(0);
                self.make_room(0);
                self.buckets[0].insert(0, (key, e.1, now));
                return hit(0, e.1);
            }
        }
        hit(at as u8, e.1)
    }

    fn lookup(&self, key: u64) -> Option<Hit> {
        self.buckets
            .iter()
            .enumerate()
            .find_map(|(b, list)| list.iter().find(|e| e.0 == key).map(|e| hit(b as u8, e.1)))
    }

    fn block(&mut self, key: u64, now: u64) -> Hit {
        let count = self.take(key).map_or(0, |(_, e)| e.1);
        self.make_room(0);
        self.buckets[0].insert(0, (key, count, now));
        hit(0, count)
    }

    fn forget(&mut self, key: u64) -> bool {
        self.take(key).is_some()
    }

    fn dump(&self) -> Vec<Vec<(u64, u32)>> {
        self.buckets
            .iter()
            .map(|l| l.iter().map(|e| (e.0, e.1)).collect())
            .collect()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Increment(u64),
    Lookup(u64),
    Block(u64),
    Forget(u64),
}

fn params_strategy() -> impl Strategy<Value = SieveParams> {
    (1u8..=4, 0u8..=1).prop_flat_map(|(buckets, extra)| {
        let perma = (0u32..=12, 0..=buckets + 1, proptest::option::of(1u64..=60)).prop_map(
            |(limit, threshold, max_age)| Perma {
                limit,
                threshold,
                max_age,
            },
        );
        (proptest::option::of(1u64..=60), proptest::option::of(perma)).prop_map(
            move |(max_age, perma)| SieveParams {
                buckets,
                size: buckets + extra,
                max_age,
                perma,
            },
        )
    })
}

fn ops_strategy() -> impl Strategy<Value = Vec<(Op, u64)>> {
    let key = 0u64..40;
    let op = prop_oneof![
        12 => key.clone().prop_map(Op::Increment),
        2 => key.clone().prop_map(Op::Lookup),
        1 => key.clone().prop_map(Op::Block),
        1 => key.prop_map(Op::Forget),
    ];
    proptest::collection::vec((op, 0u64..=8), 0..600)
}

proptest! {
    #[test]
    fn matches_the_model(params in params_strategy(), ops in ops_strategy()) {
        let sieve = Sieve::with_shards(params, 1);
        let mut model = Model::new(params);
        let mut now = 0;
        for (op, step) in ops {
            now += step;
            match op {
                Op::Increment(k) => prop_assert_eq!(sieve.increment(k, now), model.increment(k, now)),
                Op::Lookup(k) => prop_assert_eq!(sieve.lookup(k), model.lookup(k)),
                Op::Block(k) => prop_assert_eq!(sieve.block(k, now), model.block(k, now)),
                Op::Forget(k) => prop_assert_eq!(sieve.forget(k), model.forget(k)),
            }
            sieve.check();
            prop_assert_eq!(&sieve.dump()[0], &model.dump());
        }
        prop_assert_eq!(sieve.len(), model.buckets.iter().map(Vec::len).sum::<usize>());
    }
}
