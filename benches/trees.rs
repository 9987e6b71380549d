//! Build + evaluate the greedy and the 16-ary launch trees at 1k, 100k and 1M nodes.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use libi::tree::{evaluate, LaunchModel, Shape, Tree};

fn trees(c: &mut Criterion) {
    let model = LaunchModel::new(0.007, 0.172);
    let mut g = c.benchmark_group("build+evaluate");
    for n in [1_000usize, 100_000, 1_000_000] {
        for shape in [Shape::Greedy, Shape::Kary(16)] {
            g.bench_with_input(BenchmarkId::new(shape.to_string(), n), &n, |b, &n| {
                b.iter(|| {
                    let t = Tree::build(&shape, black_box(n), &model);
                    black_box(evaluate(&t, &model).total)
                })
            });
        }
    }
    g.finish();
    let mut g = c.benchmark_group("build");
    for shape in [Shape::Greedy, Shape::Kary(16)] {
        g.bench_with_input(
            BenchmarkId::new(shape.to_string(), 1_000_000),
            &1_000_000usize,
            |b, &n| b.iter(|| black_box(Tree::build(&shape, black_box(n), &model))),
        );
    }
    g.finish();
}

criterion_group!(benches, trees);
criterion_main!(benches);
