import ServiceKitCore

/// What every service's pages share: the app's name and its colour (`APP_NAME`, `PAGE_ACCENT_COLOR`).
public struct PageSettings: Sendable, Equatable {
    public static let defaultAccentColor = "#2f7d4f"

    public var appName: String
    /// A CSS hex colour (`#rgb` or `#rrggbb`): buttons and the app's name. Buttons write white on it,
    /// so a dark enough one.
    package var accentColor: String

    public init(appName: String = "Food Backend", accentColor: String = PageSettings.defaultAccentColor) {
        self.appName = appName
        self.accentColor = accentColor
    }

    public init(reading env: inout EnvironmentReader) {
        appName = env.string("APP_NAME", default: "Food Backend")
        accentColor = env.string("PAGE_ACCENT_COLOR", default: Self.defaultAccentColor)
        if !Self.isHexColor(accentColor) {
            env.report("PAGE_ACCENT_COLOR: must be a hex colour such as #2f7d4f, got \"\(accentColor)\"")
            accentColor = Self.defaultAccentColor
        }
    }

    /// Only a hex colour reaches the style block: anything else could end it (`</style>`) or change
    /// its hash, which the Content-Security-Policy names.
    package static func isHexColor(_ text: String) -> Bool {
        let digits = text.utf8.dropFirst()
        return text.utf8.first == UInt8(ascii: "#") && (digits.count == 3 || digits.count == 6)
            && digits.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0 | 0x20) }
    }
}
