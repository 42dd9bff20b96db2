module github.com/libeventq/libeventq/bindings/go

go 1.24
