package main
import (
 _ "github.com/hashicorp/go-plugin"
 _ "github.com/jmoiron/sqlx"
 _ "github.com/mattn/go-sqlite3"
 _ "gonum.org/v1/gonum/stat"
 _ "gonum.org/v1/gonum/stat/distuv"
 _ "gonum.org/v1/plot"
 _ "gonum.org/v1/plot/vg/vgsvg"
 _ "github.com/spf13/cobra"
 _ "github.com/goccy/go-yaml"
 _ "github.com/vbauerster/mpb/v8"
 _ "github.com/ebitengine/purego"
 _ "golang.org/x/sync/errgroup"
 _ "google.golang.org/grpc"
 _ "google.golang.org/protobuf/proto"
)
func main(){}
