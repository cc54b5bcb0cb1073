//! Migration from Meituan Leaf and Layotto: floe on their data, written as they write it, on the
//! real servers (docs/migrate.md, "Sequences: from Leaf's leaf_alloc and from Layotto's
//! stores").

#[cfg(all(
    feature = "redis",
    feature = "etcd",
    feature = "zookeeper",
    feature = "mysql"
))]
mod layotto;
#[cfg(feature = "mysql")]
mod leaf;
