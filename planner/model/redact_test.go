package model

import "testing"

func TestSecretLabel(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want bool
	}{
		{"vault.token", true}, {"DB_PASSWORD", true}, {"db_pass", true}, {"access_key", true}, {"AWS_ACCESS_KEY_ID", true},
		{"signing-key", true}, {"tls.key", true}, {"key", true}, {"KEY", true}, {"db_pw", true}, {"Authorization", true},
		{"bearer", true}, {"accessKey", true},
		{"team", false}, {"monkey", false}, {"keyboard", false}, {"app", false}, {"tier", false}, {"version", false},
	} {
		t.Run(tc.key, func(t *testing.T) {
			if got := SecretLabel(tc.key); got != tc.want {
				t.Errorf("SecretLabel(%q) = %v, want %v", tc.key, got, tc.want)
			}
		})
	}
}
