// Command floe-client calls floe.v1 from Go: every kind of ID, a stream, and sequences WEAK and
// STRONG.
//
// Usage: floe-client [ADDRESS]   (default: $FLOE_GRPC, else 127.0.0.1:34904)
//
// Its floe.v1 package is generated from floe's proto by protoc-gen-go and protoc-gen-go-grpc
// (run.sh does it), at the import path of the proto's go_package.
//
// Prints one line per ID: `NextIds KIND VALUE TEXT` and `StreamIds KIND VALUE TEXT` (VALUE: a
// Snowflake ID's number, any other kind's bytes in hex; TEXT: the ID's text, answered by the
// server), then `NextSequence WEAK|STRONG ID` and `StreamSequence STRONG ID`.
package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	floev1 "example.invalid/floe/gen/go/floe/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

var kinds = []struct {
	name string
	kind floev1.Kind
}{
	{"snowflake", floev1.Kind_KIND_SNOWFLAKE},
	{"sno", floev1.Kind_KIND_SNO},
	{"lexical", floev1.Kind_KIND_LEXICAL},
	{"uuid7", floev1.Kind_KIND_UUID7},
	{"ulid", floev1.Kind_KIND_ULID},
}

func printIDs(method, kind string, r *floev1.NextIdsResponse) {
	// Snowflake IDs come as numbers (uint64), the others as bytes.
	for i, text := range r.Text {
		var value string
		if kind == "snowflake" {
			value = fmt.Sprint(r.Numbers[i])
		} else {
			value = hex.EncodeToString(r.Binary[i])
		}
		fmt.Println(method, kind, value, text)
	}
}

func run(address string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Plain text, as `floe serve` without TLS: grpc.WithTransportCredentials with
	// credentials.NewTLS for a server with tls.cert_file (insecure.NewCredentials() in
	// grpc-go 1.34 and later for plain text).
	conn, err := grpc.DialContext(ctx, address, grpc.WithInsecure())
	if err != nil {
		return err
	}
	defer conn.Close()
	client := floev1.NewFloeClient(conn)

	for _, k := range kinds {
		r, err := client.NextIds(ctx, &floev1.NextIdsRequest{Kind: k.kind, Count: 3, WithText: true})
		if err != nil {
			return err
		}
		printIDs("NextIds", k.name, r)
	}

	// A bulk export: 1,000 Snowflake IDs in messages of 250.
	ids, err := client.StreamIds(ctx, &floev1.StreamIdsRequest{
		Kind: floev1.Kind_KIND_SNOWFLAKE, Total: 1000, Batch: 250, WithText: true,
	})
	if err != nil {
		return err
	}
	for {
		r, err := ids.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		printIDs("StreamIds", "snowflake", r)
	}

	// Sequences on the server's only store ("" picks it): WEAK IDs increase for this server; a
	// STRONG batch is a run of consecutive IDs.
	for _, s := range []struct {
		increment floev1.Increment
		key       string
	}{{floev1.Increment_INCREMENT_WEAK, "orders"}, {floev1.Increment_INCREMENT_STRONG, "invoices"}} {
		name := strings.TrimPrefix(s.increment.String(), "INCREMENT_")
		for i := 0; i < 2; i++ {
			r, err := client.NextSequence(ctx, &floev1.NextSequenceRequest{
				Key: s.key, Increment: s.increment, Count: 5,
			})
			if err != nil {
				return err
			}
			for _, id := range r.Ids {
				fmt.Println("NextSequence", name, id)
			}
		}
	}

	seq, err := client.StreamSequence(ctx, &floev1.StreamSequenceRequest{
		Key: "invoices", Increment: floev1.Increment_INCREMENT_STRONG, Total: 20, Batch: 8,
	})
	if err != nil {
		return err
	}
	for {
		r, err := seq.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		for _, id := range r.Ids {
			fmt.Println("StreamSequence STRONG", id)
		}
	}
}

func main() {
	address := os.Getenv("FLOE_GRPC")
	if len(os.Args) > 1 {
		address = os.Args[1]
	}
	if address == "" {
		address = "127.0.0.1:34904"
	}
	if err := run(address); err != nil {
		if s, ok := status.FromError(err); ok {
			fmt.Fprintf(os.Stderr, "floe: %s: %s\n", s.Code(), s.Message())
		} else {
			fmt.Fprintf(os.Stderr, "floe: %v\n", err)
		}
		os.Exit(1)
	}
}
