// swift-tools-version:6.0
import PackageDescription

/// Every service is declared the same way: an executable under `Services/<Name>` that links the
/// service kit and ships its SQL migrations as a resource, and its tests under `Tests/<Name>Tests`.
/// `extra` names what a service links beyond the kit; `resources` are folders shipped beside `Migrations`.
/// The list is services.txt's (its libraries and resources columns), written here by `scripts/services`.
// generated from services.txt by scripts/services generate: edit the table, not these lines
let services: [(target: String, extra: [Target.Dependency], resources: [String])] = [
    (
        "Auth",
        [
            "Mailer",
            .product(name: "HummingbirdBcrypt", package: "hummingbird-auth"),
            .product(name: "JWTKit", package: "jwt-kit"),
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "CryptoExtras", package: "swift-crypto"),
            .product(name: "AsyncHTTPClient", package: "async-http-client"),
        ],
        ["Resources", "Pages"]
    ),
    ("Social", ["Images", .product(name: "NIOPosix", package: "swift-nio")], []),
    ("Invitations", ["Mailer"], ["Pages"]),
    ("Entitlements", ["AppStoreServer", .product(name: "X509", package: "swift-certificates"), .product(name: "JWTKit", package: "jwt-kit")], ["Resources"]),
    ("Nutrition", ["CShareCard", "Images", .product(name: "NIOPosix", package: "swift-nio"), .product(name: "AsyncHTTPClient", package: "async-http-client")], ["Resources", "Pages"]),
    ("Training", [], ["Resources"]),
]
// end of the lines generated from services.txt

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny")
]

/// The kit's layers, bottom first; a service links them all and imports them through `ServiceKit`, which re-exports them.
let kitLayers: [Target.Dependency] = ["ServiceKitCore", "ServiceKitRedis", "ServiceKitDatabase", "ServiceKitEvents", "ServiceKitHTTP", "ServiceKitTokens", "ServiceKitPages"]

let kit: [Target.Dependency] =
    kitLayers + [
        "ServiceKit", "Models",
        .product(name: "Hummingbird", package: "hummingbird"),
        .product(name: "PostgresNIO", package: "postgres-nio"),
        .product(name: "Logging", package: "swift-log"),
        .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
    ]

var targets: [Target] = [
    // Email addresses are compared in one canonical form whose domain is IDNA2008's (libidn2). The
    // events' JSON Schemas are read by the contract tests and the end-to-end check, not built in.
    .target(name: "Models", dependencies: ["CIDN2"], path: "Shared/Models", exclude: ["Events/schemas"], swiftSettings: swiftSettings),
    .systemLibrary(name: "CIDN2", path: "Shared/CIDN2", providers: [.apt(["libidn2-dev"])]),
    .systemLibrary(name: "CHiredis", path: "Shared/CHiredis", providers: [.apt(["libhiredis-dev"])]),
    .systemLibrary(name: "CCurl", path: "Shared/CCurl", providers: [.apt(["libcurl4-openssl-dev"])]),
    // glibc functions Swift's Glibc module does not show (malloc tuning, spawn's close-from).
    .target(name: "CGlibcExtras", path: "Shared/CGlibcExtras"),
    // Avatars: libvips decodes and re-encodes them without their metadata. Its options are C
    // variadic arguments, so a few lines of C (CImageScrub) call it, and Swift calls those.
    .systemLibrary(name: "CVips", path: "Shared/CVips", pkgConfig: "vips", providers: [.apt(["libvips-dev"])]),
    // libheif (which libvips-dev brings) for the check of what a HEIF image's HEVC streams code.
    .target(name: "CImageScrub", dependencies: ["CVips"], path: "Shared/CImageScrub", linkerSettings: [.linkedLibrary("heif")]),
    // Its Swift side, shared by every service that stores images (avatars, meal photos).
    .target(
        name: "Images",
        dependencies: [
            "CImageScrub", "ServiceKitHTTP",
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
        ],
        path: "Shared/Images",
        swiftSettings: swiftSettings
    ),
    // Share cards: Cairo draws them and Pango lays out their text (wrapping, ellipsising, any UTF-8).
    // Both are pointer-heavy C APIs, so CShareCard's C draws the whole card and Swift makes one call.
    .systemLibrary(name: "CCairo", path: "Shared/CCairo", pkgConfig: "pangocairo", providers: [.apt(["libcairo2-dev", "libpango1.0-dev"])]),
    .target(name: "CShareCard", dependencies: ["CCairo"], path: "Shared/CShareCard", linkerSettings: [.linkedLibrary("m")]),
    // The kit, in layers: each imports only the layers it declares below, so a wrong-way import does
    // not compile (docs/ARCHITECTURE.md has the diagram): Core; Redis and Database on Core; Events on
    // those three; HTTP on Core and Database; Tokens on Core and HTTP; ServiceKit (the bootstrap
    // that wires them into a service, and re-exports them and Models: a service imports it alone) on all.
    .target(
        name: "ServiceKitCore",
        dependencies: [
            .product(name: "Logging", package: "swift-log"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "Metrics", package: "swift-metrics"),
            .product(name: "Prometheus", package: "swift-prometheus"),
        ],
        path: "Shared/ServiceKit/Core",
        swiftSettings: swiftSettings
    ),
    .target(
        name: "ServiceKitRedis",
        dependencies: [
            "ServiceKitCore", "CHiredis",
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
        ],
        path: "Shared/ServiceKit/Redis",
        swiftSettings: swiftSettings
    ),
    .target(
        name: "ServiceKitDatabase",
        dependencies: [
            "ServiceKitCore",
            .product(name: "PostgresNIO", package: "postgres-nio"),
            // Only for `ConnectionPoolError`, which PostgresNIO's pool throws and exports nowhere else
            // (ConnectionPoolErrors.swift wraps it; a test fails if it stops matching).
            .product(name: "_ConnectionPoolModule", package: "postgres-nio"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            .product(name: "Crypto", package: "swift-crypto"),
        ],
        path: "Shared/ServiceKit/Database",
        swiftSettings: swiftSettings
    ),
    .target(
        name: "ServiceKitEvents",
        dependencies: [
            "ServiceKitCore", "ServiceKitRedis", "ServiceKitDatabase", "Models",
            .product(name: "PostgresNIO", package: "postgres-nio"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
        ],
        path: "Shared/ServiceKit/Events",
        swiftSettings: swiftSettings
    ),
    .target(
        name: "ServiceKitHTTP",
        dependencies: [
            "ServiceKitCore", "ServiceKitDatabase", "Models",
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "PostgresNIO", package: "postgres-nio"),
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOHTTP1", package: "swift-nio"),
            // `ServerQuiescingHelper`, for the kit's HTTP listener's graceful shutdown.
            .product(name: "NIOExtras", package: "swift-nio-extras"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
        ],
        path: "Shared/ServiceKit/HTTP",
        swiftSettings: swiftSettings
    ),
    .target(
        name: "ServiceKitTokens",
        dependencies: [
            "ServiceKitCore", "ServiceKitHTTP", "Models",
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "JWTKit", package: "jwt-kit"),
            .product(name: "AsyncHTTPClient", package: "async-http-client"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "Crypto", package: "swift-crypto"),
        ],
        path: "Shared/ServiceKit/Tokens",
        swiftSettings: swiftSettings
    ),
    // The HTML pages mails and share links open: Mustache templates in one layout, one set of headers.
    .target(
        name: "ServiceKitPages",
        dependencies: [
            "ServiceKitCore", "ServiceKitHTTP",
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "Mustache", package: "swift-mustache"),
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "NIOCore", package: "swift-nio"),
        ],
        path: "Shared/ServiceKit/Pages",
        swiftSettings: swiftSettings
    ),
    .target(
        name: "ServiceKit",
        dependencies: kitLayers + [
            "Models", "CGlibcExtras",
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "PostgresNIO", package: "postgres-nio"),
            .product(name: "AsyncHTTPClient", package: "async-http-client"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
        ],
        path: "Shared/ServiceKit/ServiceKit",
        swiftSettings: swiftSettings
    ),
    // App Store signed data (StoreKit 2 transactions, Server Notifications V2) verified as Apple's
    // own server library does: jwt-kit's x5c verifier with swift-certificates and Apple's policy on top.
    .target(
        name: "AppStoreServer",
        dependencies: [
            .product(name: "JWTKit", package: "jwt-kit"),
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "X509", package: "swift-certificates"),
            .product(name: "SwiftASN1", package: "swift-asn1"),
        ],
        path: "Shared/AppStoreServer",
        swiftSettings: swiftSettings
    ),
    // The services' OpenAPI documents merged into one (the gateway's GET /openapi.json).
    .target(
        name: "OpenAPIMerge",
        dependencies: ["Models", .product(name: "Yams", package: "Yams")],
        path: "Shared/OpenAPIMerge",
        swiftSettings: swiftSettings
    ),
    // `scripts/openapi`'s merge, for docs/openapi.json: the gateway's own code, run on the repository's files.
    .executableTarget(name: "OpenAPITool", dependencies: ["OpenAPIMerge"], path: "Shared/OpenAPITool", swiftSettings: swiftSettings),
    .testTarget(
        name: "OpenAPIMergeTests",
        dependencies: ["OpenAPIMerge", "Models"],
        path: "Tests/OpenAPIMergeTests",
        swiftSettings: swiftSettings
    ),
    // Mail goes in a library of its own: only services that send mail load libcurl.
    .target(
        name: "Mailer",
        dependencies: [
            "ServiceKit", "CCurl", "ServiceKitCore", "ServiceKitDatabase", "ServiceKitEvents", "ServiceKitHTTP",
            .product(name: "PostgresNIO", package: "postgres-nio"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "NIOPosix", package: "swift-nio"),
        ],
        path: "Shared/Mailer",
        swiftSettings: swiftSettings
    ),
    .testTarget(
        name: "MailerTests",
        dependencies: kit + ["Mailer", "TestSupport"],
        path: "Tests/MailerTests",
        swiftSettings: swiftSettings
    ),
    .executableTarget(
        name: "Gateway",
        dependencies: kit + [
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOHTTP1", package: "swift-nio"),
            .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
            "OpenAPIMerge",
            // The live event stream checks access tokens against auth's JWKS.
            .product(name: "AsyncHTTPClient", package: "async-http-client"),
        ],
        path: "Services/Gateway",
        // Its own openapi.yaml, merged with the services' at GET /openapi.json.
        resources: [.copy("openapi.yaml")],
        swiftSettings: swiftSettings
    ),
    .target(
        name: "TestSupport",
        dependencies: kit + [
            "CGlibcExtras",
            .product(name: "HummingbirdTesting", package: "hummingbird"),
            .product(name: "JWTKit", package: "jwt-kit"),
            .product(name: "X509", package: "swift-certificates"),
            .product(name: "SwiftASN1", package: "swift-asn1"),
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "AsyncHTTPClient", package: "async-http-client"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOHTTP1", package: "swift-nio"),
        ],
        path: "Tests/TestSupport",
        swiftSettings: swiftSettings
    ),
    .executableTarget(
        name: "EventBench",
        dependencies: kit,
        path: "Tests/Benchmarks/EventBench",
        swiftSettings: swiftSettings
    ),
    .executableTarget(
        name: "AppStoreBench",
        dependencies: ["AppStoreServer", "TestSupport", .product(name: "JWTKit", package: "jwt-kit"), .product(name: "Crypto", package: "swift-crypto")],
        path: "Tests/Benchmarks/AppStoreBench",
        swiftSettings: swiftSettings
    ),
    .executableTarget(
        name: "BcryptBench",
        dependencies: [.product(name: "HummingbirdBcrypt", package: "hummingbird-auth")],
        path: "Tests/Benchmarks/BcryptBench",
        swiftSettings: swiftSettings
    ),
    .testTarget(
        name: "ServiceKitTests",
        dependencies: kit + [
            "TestSupport", "CHiredis",
            .product(name: "HummingbirdTesting", package: "hummingbird"),
            .product(name: "_ConnectionPoolModule", package: "postgres-nio"),
            .product(name: "JWTKit", package: "jwt-kit"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "Prometheus", package: "swift-prometheus"),
        ],
        path: "Tests/ServiceKitTests",
        swiftSettings: swiftSettings
    ),
    .testTarget(
        name: "GatewayTests",
        dependencies: kit + [
            "Gateway", "TestSupport", "OpenAPIMerge",
            .product(name: "HummingbirdTesting", package: "hummingbird"),
            // The live event tests read streams through the gateway over HTTP.
            .product(name: "AsyncHTTPClient", package: "async-http-client"),
        ],
        path: "Tests/GatewayTests",
        swiftSettings: swiftSettings
    ),
]

// The Swift client (Clients/Swift, its own package for apps) built here too, from the same sources,
// so its tests and the journeys against the stack share the server's build of SwiftNIO.
let clientDependencies: [Target.Dependency] = [
    .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
    .product(name: "HTTPTypes", package: "swift-http-types"),
]
targets += [
    .target(name: "FoodBackendAPI", dependencies: clientDependencies, path: "Clients/Swift/Sources/FoodBackendAPI"),
    .target(
        name: "FoodBackendClient",
        dependencies: clientDependencies + [
            "FoodBackendAPI",
            .product(name: "Crypto", package: "swift-crypto", condition: .when(platforms: [.linux])),
            .product(name: "OpenAPIURLSession", package: "swift-openapi-urlsession", condition: .when(platforms: [.iOS, .macOS])),
            .product(name: "OpenAPIAsyncHTTPClient", package: "swift-openapi-async-http-client", condition: .when(platforms: [.linux])),
            .product(name: "AsyncHTTPClient", package: "async-http-client", condition: .when(platforms: [.linux])),
        ],
        path: "Clients/Swift/Sources/FoodBackendClient"
    ),
    .testTarget(
        name: "FoodBackendClientTests",
        dependencies: clientDependencies + [
            "FoodBackendClient", "FoodBackendAPI",
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOHTTP1", package: "swift-nio"),
        ],
        path: "Clients/Swift/Tests/FoodBackendClientTests"
    ),
    // The apps' flows through the client against the running stack (scripts/e2e/test_client.py), and
    // the client's per-request cost against the same stack (scripts/bench/client).
    .executableTarget(name: "ClientJourneys", dependencies: clientDependencies + ["FoodBackendClient", "FoodBackendAPI"], path: "Clients/Swift/Journeys"),
    .executableTarget(name: "ClientBench", dependencies: clientDependencies + ["FoodBackendClient", "FoodBackendAPI"], path: "Clients/Swift/Bench"),
]

for service in services {
    targets.append(
        .testTarget(
            name: "\(service.target)Tests",
            dependencies: kit + service.extra + [.target(name: service.target), "TestSupport", .product(name: "HummingbirdTesting", package: "hummingbird")],
            path: "Tests/\(service.target)Tests",
            swiftSettings: swiftSettings
        ))
    targets.append(
        .executableTarget(
            name: service.target,
            dependencies: kit + service.extra,
            path: "Services/\(service.target)",
            // openapi.yaml is served at GET /openapi.yaml (the kit's OpenAPIDocumentRoute).
            resources: [.copy("Migrations"), .copy("openapi.yaml")] + service.resources.map { .copy($0) },
            swiftSettings: swiftSettings
        ))
}

let package = Package(
    name: "FoodBackend",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "gateway", targets: ["Gateway"])
    ] + services.map { .executable(name: $0.target.lowercased(), targets: [$0.target]) },
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.8.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.3"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        // For `NIOHTTPTypesHTTP1`: the gateway puts its proxy handler before Hummingbird's HTTP/1 codec.
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth.git", from: "2.5.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/jpsim/Yams", from: "6.2.2"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", from: "2.1.1"),
        // The Swift client's runtime and transports (Clients/Swift).
        .package(url: "https://github.com/apple/swift-openapi-runtime", from: "1.13.4"),
        .package(url: "https://github.com/apple/swift-openapi-urlsession", from: "1.4.0"),
        .package(url: "https://github.com/swift-server/swift-openapi-async-http-client", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
    ],
    targets: targets
)
