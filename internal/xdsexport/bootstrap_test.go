package xdsexport

import (
	"encoding/json"
	"os"
	"testing"

	bootstrap "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	// The types the example's typed_config fields name.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// TestEnvoyBootstrapExample parses configs/envoy/envoy-xds.yaml as Envoy
// does (YAML as the proto's JSON mapping, unknown fields refused) into a
// v3 Bootstrap, validates it with Envoy's own constraints
// (protoc-gen-validate), and checks that it points at Spillway's export:
// ADS over gRPC, a site in node.locality.region, listeners and clusters
// from ADS.
func TestEnvoyBootstrapExample(t *testing.T) {
	const path = "../../configs/envoy/envoy-xds.yaml"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var b bootstrap.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		t.Fatalf("%s: not an Envoy v3 bootstrap: %v", path, err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if site := SiteOf(b.Node); site != "nyc" {
		t.Errorf("node.locality.region = %q, want the site nyc", site)
	}
	dr := b.GetDynamicResources()
	if dr.GetAdsConfig().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != "spillway_xds" ||
		dr.GetLdsConfig().GetAds() == nil || dr.GetCdsConfig().GetAds() == nil {
		t.Errorf("dynamic_resources = %v, want LDS and CDS over ADS to cluster spillway_xds", dr)
	}
	if len(b.GetStaticResources().GetClusters()) != 1 || b.GetStaticResources().GetClusters()[0].GetTransportSocket() == nil {
		t.Errorf("want one static cluster, spillway_xds, with TLS")
	}
}
