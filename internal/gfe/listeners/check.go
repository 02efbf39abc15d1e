package listeners

import (
	"errors"
	"fmt"

	"github.com/spillway-lb/spillway/config"
)

// CheckCertificates loads the certificate and key files of every https
// listener of ls as Apply does before it accepts a snapshot, and returns
// every file that does not load, naming its listener
// ("listeners[1].certificates[0]: cert_file: ..."). It binds nothing.
func CheckCertificates(ls []config.Listener) error {
	var errs []error
	for i, l := range ls {
		if l.Protocol != config.ListenerHTTPS {
			continue
		}
		if _, err := loadCertSet(fmt.Sprintf("listeners[%d]", i), l.Certificates, nil); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
