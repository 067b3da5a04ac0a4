import Foundation

/// Reads configuration from environment variables and collects every problem instead of stopping at
/// the first, so that a misconfigured process says everything that is wrong in one message.
public struct EnvironmentReader {
    public let values: [String: String]
    /// In `production` (APP_ENV) the defaults meant for the local stack are refused for variables that
    /// say so: a real deployment must name its database, Redis and keys.
    public let isProduction: Bool
    public private(set) var problems: [String] = []

    public init(_ values: [String: String] = ProcessInfo.processInfo.environment) {
        self.values = values
        let environment = values["APP_ENV"]?.lowercased() ?? "development"
        self.isProduction = environment == "production"
        if !["development", "test", "production"].contains(environment) {
            problems.append("APP_ENV: must be development, test or production, got \"\(environment)\"")
        }
    }

    private mutating func raw(_ name: String, localDefault: String?, requiredInProduction: Bool) -> String? {
        if let value = values[name] {
            if value.trimmingCharacters(in: .whitespaces).isEmpty {
                problems.append("\(name): is set but empty")
                return nil
            }
            return value
        }
        if requiredInProduction && isProduction {
            problems.append("\(name): is required when APP_ENV=production")
            return nil
        }
        if localDefault == nil {
            problems.append("\(name): is required")
        }
        return localDefault
    }

    /// A text value; `default` serves the local stack, `nil` makes it required.
    public mutating func string(_ name: String, default localDefault: String?, requiredInProduction: Bool = false) -> String {
        raw(name, localDefault: localDefault, requiredInProduction: requiredInProduction) ?? ""
    }

    /// A text value that may be absent.
    public mutating func optionalString(_ name: String) -> String? {
        guard let value = values[name], !value.trimmingCharacters(in: .whitespaces).isEmpty else { return nil }
        return value
    }

    public mutating func int(_ name: String, default localDefault: Int, range: ClosedRange<Int>) -> Int {
        guard let text = raw(name, localDefault: String(localDefault), requiredInProduction: false) else { return localDefault }
        guard let value = Int(text.trimmingCharacters(in: .whitespaces)) else {
            problems.append("\(name): must be a whole number, got \"\(text)\"")
            return localDefault
        }
        guard range.contains(value) else {
            problems.append("\(name): must be between \(range.lowerBound) and \(range.upperBound), got \(value)")
            return localDefault
        }
        return value
    }

    /// A duration given in milliseconds.
    public mutating func milliseconds(_ name: String, default localDefault: Int, range: ClosedRange<Int>) -> Duration {
        .milliseconds(int(name, default: localDefault, range: range))
    }

    public mutating func bool(_ name: String, default localDefault: Bool) -> Bool {
        guard let text = raw(name, localDefault: localDefault ? "true" : "false", requiredInProduction: false) else { return localDefault }
        switch text.lowercased() {
        case "1", "true", "yes", "on": return true
        case "0", "false", "no", "off": return false
        default:
            problems.append("\(name): must be true or false, got \"\(text)\"")
            return localDefault
        }
    }

    /// A URL with one of the given schemes.
    public mutating func url(_ name: String, default localDefault: String?, schemes: [String], requiredInProduction: Bool = false) -> URLComponents? {
        guard let text = raw(name, localDefault: localDefault, requiredInProduction: requiredInProduction) else { return nil }
        guard let url = URLComponents(string: text), let scheme = url.scheme, schemes.contains(scheme), url.hostName != nil else {
            problems.append("\(name): must be a URL starting with \(schemes.map { "\($0)://" }.joined(separator: " or ")) and naming a host, got \"\(Self.redacted(text))\"")
            return nil
        }
        return url
    }

    public mutating func oneOf(_ name: String, default localDefault: String, allowed: [String], requiredInProduction: Bool = false) -> String {
        guard let value = raw(name, localDefault: localDefault, requiredInProduction: requiredInProduction)?.lowercased() else { return localDefault }
        guard allowed.contains(value) else {
            problems.append("\(name): must be one of \(allowed.joined(separator: ", ")), got \"\(value)\"")
            return localDefault
        }
        return value
    }

    /// Adds a problem found by a check that spans several variables.
    public mutating func report(_ problem: String) {
        problems.append(problem)
    }

    /// Throws one `ConfigurationError` naming every problem found.
    public func finish() throws {
        if !problems.isEmpty { throw ConfigurationError(problems: problems) }
    }

    package static func redacted(_ text: String) -> String {
        guard let url = URLComponents(string: text), let password = url.password else { return text }
        // The password as written may be percent-encoded, or not where Foundation encodes it itself.
        return [url.percentEncodedPassword, password].compactMap { $0 }.reduce(text) { $0.replacingOccurrences(of: ":\($1)@", with: ":***@") }
    }
}

/// Every configuration problem found at start-up.
public struct ConfigurationError: Error, CustomStringConvertible {
    public var problems: [String]
    public init(problems: [String]) { self.problems = problems }
    public var description: String {
        "invalid configuration (\(problems.count) problem\(problems.count == 1 ? "" : "s")):\n" + problems.map { "  - \($0)" }.joined(separator: "\n")
    }
}
