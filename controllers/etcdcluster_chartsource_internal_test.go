package controllers

import (
	"encoding/base64"
	"testing"
)

func TestDockerConfigLogin(t *testing.T) {
	auth := base64.StdEncoding.EncodeToString([]byte("team:s3cret"))
	for _, tc := range []struct {
		name, config, host string
		user, pass         string
		ok                 bool
	}{
		{"username and password", `{"auths":{"reg.example.com:5000":{"username":"team","password":"s3cret"}}}`, "reg.example.com:5000", "team", "s3cret", true},
		{"auth field", `{"auths":{"reg.example.com":{"auth":"` + auth + `"}}}`, "reg.example.com", "team", "s3cret", true},
		{"https key with a slash", `{"auths":{"https://reg.example.com/":{"auth":"` + auth + `"}}}`, "reg.example.com", "team", "s3cret", true},
		{"another host", `{"auths":{"other.example.com":{"auth":"` + auth + `"}}}`, "reg.example.com", "", "", false},
		{"username only", `{"auths":{"reg.example.com":{"username":"team"}}}`, "reg.example.com", "", "", false},
		{"identity token only", `{"auths":{"reg.example.com":{"identitytoken":"t"}}}`, "reg.example.com", "", "", false},
		{"not JSON", `nope`, "reg.example.com", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, p, ok := dockerConfigLogin([]byte(tc.config), tc.host)
			if u != tc.user || p != tc.pass || ok != tc.ok {
				t.Fatalf("got %q %q %v, want %q %q %v", u, p, ok, tc.user, tc.pass, tc.ok)
			}
		})
	}
}
