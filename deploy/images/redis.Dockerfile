# allot-redis: the host's redis-server on an empty image. `make images` copies
# the real binary (Debian's /usr/bin/redis-server is a symlink to
# redis-check-rdb, and Redis picks its mode from its file name) to
# rootfs/usr/bin/redis-server, and every library ldd lists, and the loader, to
# rootfs at their exact paths. No persistence; the options after the entry
# point (--port, ...) come from the container's command.
FROM scratch
COPY rootfs/ /
EXPOSE 6379
ENTRYPOINT ["/usr/bin/redis-server", "--protected-mode", "no", "--save", "", "--appendonly", "no"]
