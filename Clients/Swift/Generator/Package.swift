// swift-tools-version:6.0
import PackageDescription

/// Only the generator's command-line tool, for `scripts/openapi client`: the client's generated code
/// is committed, so neither an app nor CI builds this.
let package = Package(
    name: "FoodBackendClientGenerator",
    platforms: [.macOS(.v13)],
    dependencies: [
        .package(url: "https://github.com/apple/swift-openapi-generator", from: "1.14.3")
    ],
    targets: []
)
