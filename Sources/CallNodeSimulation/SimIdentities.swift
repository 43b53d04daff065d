/// Fixed identities for the simulated nodes (a private key and its self-signed certificate
/// each), written into each node's home before it starts: a key made at start-up draws on the
/// CPU's own random source, which no seed reaches, and the nodes' fingerprints (which order
/// what is keyed by them) would differ on every run. For simulation only: these keys are public.
enum SimIdentities {
    static let all: [(key: String, certificate: String)] = [
        (key: """
        -----BEGIN PRIVATE KEY-----
        MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgp3dyrbJ1RWTdAocA
        fAJMwXHGrZH0e93fIcFt1atZAkWhRANCAATdfNpTBE2qB2eSYDfrr9zcnQ1phdDv
        egqKv9qFLBhA2QVTw8r8fk8Q0ir/bqKHX25j7+BFHL85vUpjctJVQ2KQ
        -----END PRIVATE KEY-----
        """,
         certificate: """
        -----BEGIN CERTIFICATE-----
        MIIBNzCB3qADAgECAhRpoQPfDtCGHIG5ndIAuU9DAd7lDzAKBggqhkjOPQQDAjAT
        MREwDwYDVQQDDAhjYWxsbm9kZTAeFw0yNjExMjcwMDQ4NDZaFw00NjExMjIwMTQ4
        NDZaMBMxETAPBgNVBAMMCGNhbGxub2RlMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcD
        QgAE3XzaUwRNqgdnkmA366/c3J0NaYXQ73oKir/ahSwYQNkFU8PK/H5PENIq/26i
        h19uY+/gRRy/Ob1KY3LSVUNikKMQMA4wDAYDVR0TAQH/BAIwADAKBggqhkjOPQQD
        AgNIADBFAiEAigvSFmqT1o3DEhOS4ZfgOqUxQjCDF4iwedvm31/Ez8gCIDp15FZO
        XOJhcvRviJf8YfjZrX83b5OR5eMcP6Eh6RxZ
        -----END CERTIFICATE-----
        """),
        (key: """
        -----BEGIN PRIVATE KEY-----
        MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgIqCs12vb/DG4BGFL
        Gl65TvXO7/C/w9FFp+UfYoYj0LOhRANCAAT+RcHsejbUoFEP+Sh1XbhfRyUV5xTv
        DRDal7QVgn4tFhtN8AOOmCbf5+ewkr2wsr21e04B4QX7lom2R55joYOn
        -----END PRIVATE KEY-----
        """,
         certificate: """
        -----BEGIN CERTIFICATE-----
        MIIBNzCB36ADAgECAhUAibI33qVzuv4F1OK83+2deXBS2e0wCgYIKoZIzj0EAwIw
        EzERMA8GA1UEAwwIY2FsbG5vZGUwHhcNMjYxMTI3MDA0ODQ2WhcNNDYxMTIyMDE0
        ODQ2WjATMREwDwYDVQQDDAhjYWxsbm9kZTBZMBMGByqGSM49AgEGCCqGSM49AwEH
        A0IABP5Fwex6NtSgUQ/5KHVduF9HJRXnFO8NENqXtBWCfi0WG03wA46YJt/n57CS
        vbCyvbV7TgHhBfuWibZHnmOhg6ejEDAOMAwGA1UdEwEB/wQCMAAwCgYIKoZIzj0E
        AwIDRwAwRAIgImfqxyyezkmsY6wfHyb0njCYdHL84OZFMYma8R5zc1wCIE82CfA1
        EhSLxvsGpU/9uW3WVl7lVLeDK4953MU6Bj3d
        -----END CERTIFICATE-----
        """),
        (key: """
        -----BEGIN PRIVATE KEY-----
        MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgXUHa8+MqvHZZPYNJ
        4iPSJIwMR02TOmmu78eU/+EVLmKhRANCAATyX2NEj9SZgNHrRyF7cbJPxzGxz2N+
        nWdezgtw2hzUEllsuQ/OgOtpv4NFtMaWA7jb3+gdXO0hl/WrZ3JPQyky
        -----END PRIVATE KEY-----
        """,
         certificate: """
        -----BEGIN CERTIFICATE-----
        MIIBODCB36ADAgECAhUA/mHN+R7bUniv/4B6AYTcZlleNmMwCgYIKoZIzj0EAwIw
        EzERMA8GA1UEAwwIY2FsbG5vZGUwHhcNMjYxMTI3MDA0ODQ2WhcNNDYxMTIyMDE0
        ODQ2WjATMREwDwYDVQQDDAhjYWxsbm9kZTBZMBMGByqGSM49AgEGCCqGSM49AwEH
        A0IABPJfY0SP1JmA0etHIXtxsk/HMbHPY36dZ17OC3DaHNQSWWy5D86A62m/g0W0
        xpYDuNvf6B1c7SGX9atnck9DKTKjEDAOMAwGA1UdEwEB/wQCMAAwCgYIKoZIzj0E
        AwIDSAAwRQIhALCZc5EQJI0L2SuCpWMexh/3/DatTn89ft+VtJk/jCkeAiAaMsmZ
        u8ukPMC/m59UG58wEI6vXD0bN6xweKuL5LGy0A==
        -----END CERTIFICATE-----
        """),
        (key: """
        -----BEGIN PRIVATE KEY-----
        MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgVJumLP8V6kvWiO+F
        spDMLFqpAYC75cqEBRdtNYoLi8GhRANCAATZ/OmDVp8obUC6u8/rKd7+259YyxQJ
        cfE0+q3vQdyKXnr25YKJXP0lFEP6XjET3KShjocYoxTZlDATzGd46h70
        -----END PRIVATE KEY-----
        """,
         certificate: """
        -----BEGIN CERTIFICATE-----
        MIIBODCB36ADAgECAhUAxHsdjZu6vZQ56JAjq94mdTgDDzYwCgYIKoZIzj0EAwIw
        EzERMA8GA1UEAwwIY2FsbG5vZGUwHhcNMjYxMTI3MDA0ODQ2WhcNNDYxMTIyMDE0
        ODQ2WjATMREwDwYDVQQDDAhjYWxsbm9kZTBZMBMGByqGSM49AgEGCCqGSM49AwEH
        A0IABNn86YNWnyhtQLq7z+sp3v7bn1jLFAlx8TT6re9B3Ipeevblgolc/SUUQ/pe
        MRPcpKGOhxijFNmUMBPMZ3jqHvSjEDAOMAwGA1UdEwEB/wQCMAAwCgYIKoZIzj0E
        AwIDSAAwRQIhAKWMiJ+Sq84aggv6wfog1CzUVnmHikQe1pqIBlyJzXhKAiAOCrts
        4FJmAiJE8GFpLJbFZ9UwZsuwKRgpDPrPQSj/5w==
        -----END CERTIFICATE-----
        """),
        (key: """
        -----BEGIN PRIVATE KEY-----
        MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgQJo+htQ0Q7BeYkOn
        fRZDAFBBN6TkO0nNz8tF7qoxcsihRANCAARSMHhmTFYj0SrXyaii9Zv5PGHyPDrZ
        0bQe/FpeV7jmETUvcLC6NqklYKM9jaGiwMXragu5GMCbla12at/IBJvX
        -----END PRIVATE KEY-----
        """,
         certificate: """
        -----BEGIN CERTIFICATE-----
        MIIBODCB36ADAgECAhUAq4qLzA3mJCN7FCQmeawHs74O74EwCgYIKoZIzj0EAwIw
        EzERMA8GA1UEAwwIY2FsbG5vZGUwHhcNMjYxMTI3MDA0ODQ2WhcNNDYxMTIyMDE0
        ODQ2WjATMREwDwYDVQQDDAhjYWxsbm9kZTBZMBMGByqGSM49AgEGCCqGSM49AwEH
        A0IABFIweGZMViPRKtfJqKL1m/k8YfI8OtnRtB78Wl5XuOYRNS9wsLo2qSVgoz2N
        oaLAxetqC7kYwJuVrXZq38gEm9ejEDAOMAwGA1UdEwEB/wQCMAAwCgYIKoZIzj0E
        AwIDSAAwRQIhAInh9JT/MI0KwEsmKHhUg9MdnVU3DYjt0igGcDx4eb+yAiBR7o9e
        w5e0sa6lOjk1batpk2Ia+R5I1ri1eW2+/6WI7g==
        -----END CERTIFICATE-----
        """),
    ]
}
