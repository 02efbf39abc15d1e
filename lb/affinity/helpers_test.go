package affinity

import (
	"encoding/base64"
	"encoding/binary"
)

func beUint64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func base64URL(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
