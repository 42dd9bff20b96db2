module github.com/libeventq/eventq-go

go 1.24
