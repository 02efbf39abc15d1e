package affinity

import (
	"testing"
	"time"
)

// BenchmarkPick measures Pick per mode over 100 backends, with the fallback
// used only when the mode finds no key.
func BenchmarkPick(b *testing.B) {
	bs := backendNames(100)
	for _, tt := range []struct {
		name string
		mode Mode
		req  func(p *Picker) Request
	}{
		{name: "none", mode: ModeNone, req: func(*Picker) Request { return client(1) }},
		{name: "client_ip_port_proto", mode: ModeClientIPPortProto, req: func(*Picker) Request { return client(1) }},
		{name: "header", mode: ModeHeader, req: func(*Picker) Request { return client(1) }},
		{name: "generated_cookie/valid", mode: ModeGeneratedCookie, req: func(p *Picker) Request {
			res, _ := p.Pick(Request{}, t0)
			return Request{Cookie: res.Cookie}
		}},
		{name: "generated_cookie/issue", mode: ModeGeneratedCookie, req: func(*Picker) Request { return Request{} }},
	} {
		b.Run(tt.name, func(b *testing.B) {
			p := mustPicker(b, tt.mode, bs, &fakeFallback{backends: bs}, down{})
			req := tt.req(p)
			now := t0.Add(time.Minute)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := p.Pick(req, now); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

func BenchmarkParseCookie(b *testing.B) {
	kr := mustKeyring(b, 1, 2)
	v := kr.Encode(Cookie{Backend: 42, Expires: t0.Add(time.Hour)})
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := kr.ParseCookie(v, t0); err != nil {
			b.Fatal(err)
		}
	}
}
