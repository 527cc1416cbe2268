# allot-etcd: etcd built from go.etcd.io/etcd/server/v3 (the version in allot's
# go.mod) as a static binary, on an empty image. `make images` compiles it in
# a temporary module and sends this file and the binary, named `etcd`, as the
# build context. Data lives in /var/lib/etcd (no tmpfs: it must survive a
# stop and start).
FROM scratch
COPY etcd /usr/local/bin/etcd
WORKDIR /var/lib/etcd
EXPOSE 2379 2380
ENTRYPOINT ["/usr/local/bin/etcd"]
