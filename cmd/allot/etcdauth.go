package main

import (
	"os"
	"strings"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdAuth is etcd's user/password authentication (etcd's `auth enable`),
// used beside or instead of client certificates.
type etcdAuth struct {
	username     string
	passwordFile string
}

func etcdAuthFlags(f *pflag.FlagSet, a *etcdAuth) {
	f.StringVar(&a.username, "etcd-username", "", "etcd user, when etcd has authentication enabled (with --etcd-password-file)")
	f.StringVar(&a.passwordFile, "etcd-password-file", "", "file holding the password of --etcd-username")
}

// apply sets the user and password on cfg; both flags or neither.
func (a etcdAuth) apply(cfg *clientv3.Config) error {
	switch {
	case a.username == "" && a.passwordFile == "":
		return nil
	case a.username == "":
		return usagef("--etcd-password-file needs --etcd-username")
	case a.passwordFile == "":
		return usagef("--etcd-username needs --etcd-password-file (the password is read from a file, not a flag)")
	}
	b, err := os.ReadFile(a.passwordFile)
	if err != nil {
		return usagef("--etcd-password-file: %v", err)
	}
	cfg.Username, cfg.Password = a.username, strings.TrimSpace(string(b))
	return nil
}
