import Foundation
import Models

/// One process's OpenAPI document and the name it goes by in errors (`auth`, `gateway`).
public struct OpenAPISource: Sendable {
    public var service: String
    public var document: [String: JSONValue]

    public init(service: String, document: JSONValue) throws {
        guard case .object(let object) = document else {
            throw OpenAPIMergeError.notADocument(service: service, reason: "it is not a mapping")
        }
        guard case .string(let version)? = object["openapi"], version.hasPrefix("3.") else {
            throw OpenAPIMergeError.notADocument(service: service, reason: "its `openapi` field does not say 3.x")
        }
        for key in ["paths", "components", "webhooks"] {
            if let member = object[key], member.objectValue == nil {
                throw OpenAPIMergeError.notADocument(service: service, reason: "its `\(key)` is not a mapping")
            }
        }
        self.service = service
        self.document = object
    }

    /// The document as YAML text (JSON is YAML too).
    public init(service: String, yaml: String) throws {
        let parsed: JSONValue
        do {
            parsed = try OpenAPIYAML.parse(yaml)
        } catch {
            throw OpenAPIMergeError.unreadable(service: service, reason: "\(error)")
        }
        try self.init(service: service, document: parsed)
    }

    var paths: [String: JSONValue] { document["paths"]?.objectValue ?? [:] }

    /// Every `<folder>/openapi.yaml` under `services` (the repository's `Services`), named by its folder
    /// in lower case, in the gateway's order: `Gateway` first, then the others by name.
    public static func repository(services: URL) throws -> [OpenAPISource] {
        let files = FileManager.default
        let folders = try files.contentsOfDirectory(atPath: services.path)
            .filter { files.fileExists(atPath: services.appendingPathComponent("\($0)/openapi.yaml").path) }
            .sorted { a, b in a == "Gateway" ? b != "Gateway" : b != "Gateway" && a < b }
        return try folders.map { folder in
            let file = services.appendingPathComponent("\(folder)/openapi.yaml")
            let text: String
            do {
                text = try String(contentsOf: file, encoding: .utf8)
            } catch {
                throw OpenAPIMergeError.unreadable(service: folder.lowercased(), reason: "\(error)")
            }
            return try OpenAPISource(service: folder.lowercased(), yaml: text)
        }
    }
}

/// Why documents do not merge. Each names the services involved.
public enum OpenAPIMergeError: Error, Equatable, CustomStringConvertible {
    /// The text is not YAML (or JSON).
    case unreadable(service: String, reason: String)
    /// It parses, but is not an OpenAPI 3 document.
    case notADocument(service: String, reason: String)
    /// Two documents define one component (`kind` is `schemas`, `responses` …, or `webhooks`)
    /// differently; identical ones merge into one.
    case componentConflict(kind: String, name: String, services: [String])
    /// Two documents describe the same operation.
    case duplicateOperation(method: String, path: String, services: [String])
    /// Two operations share an `operationId`.
    case duplicateOperationID(String, services: [String])
    /// Two documents give one path different path-level fields (`parameters`, `summary` …), which
    /// would then apply to the other's operations too.
    case pathItemConflict(path: String, services: [String])
    /// Everything that was wrong, when more than one thing was.
    case several([OpenAPIMergeError])

    public var description: String {
        switch self {
        case .unreadable(let service, let reason):
            "the \(service) document is not readable YAML: \(reason)"
        case .notADocument(let service, let reason):
            "the \(service) document is not an OpenAPI 3 document: \(reason)"
        case .componentConflict(let kind, let name, let services):
            "components.\(kind).\(name) differs between \(services.joined(separator: " and ")): one name with two definitions; rename one or make them the same"
        case .duplicateOperation(let method, let path, let services):
            "\(method.uppercased()) \(path) is in both \(services.joined(separator: " and "))"
        case .duplicateOperationID(let id, let services):
            "operationId \(id) is used by both \(services.joined(separator: " and "))"
        case .pathItemConflict(let path, let services):
            "the path \(path) has different path-level fields in \(services.joined(separator: " and "))"
        case .several(let errors):
            errors.map(\.description).joined(separator: "\n")
        }
    }
}

/// Merges OpenAPI 3 documents into one: the gateway's `GET /openapi.json`, and `docs/openapi.json`
/// (the `OpenAPITool` executable, which `scripts/openapi` runs):
///
/// - `openapi` is the first document's; `info` is `title`, `version` (the first document's unless
///   given) and a description naming the documents; there is no `servers` (one origin serves it all).
/// - `paths` is the union. The same method on the same path in two documents is an error, and so is
///   one path whose path-level fields (`parameters` …) differ between documents. A path in
///   `sharedPaths` (`/healthz`, which every process serves for itself) comes from the first document
///   that has it: behind the gateway only the gateway's answers.
/// - `components`, kind by kind (`schemas`, `responses`, `parameters`, `requestBodies`, `headers`,
///   `securitySchemes`, `examples` and any other), and `webhooks`: structurally equal entries of one
///   name are one entry (the shared `Problem`, `Limit`, `Cursor`); different ones are an error.
/// - An `operationId` used twice is an error.
/// - `tags` is the union by name, the first description of each winning.
/// - Root `security` stays at the root when every document has the same (or none); otherwise each
///   document's goes onto those of its operations that have none of their own.
///
/// Every conflict is reported, not just the first (`OpenAPIMergeError.several`).
public enum OpenAPIMerge {
    public static let defaultTitle = "Food backend API"
    public static let defaultSharedPaths: Set<String> = ["/healthz"]
    static let methods: Set<String> = ["get", "put", "post", "delete", "options", "head", "patch", "trace"]

    public static func merge(
        _ sources: [OpenAPISource], title: String = defaultTitle, version: String? = nil, sharedPaths: Set<String> = defaultSharedPaths
    ) throws -> JSONValue {
        guard let first = sources.first else { throw OpenAPIMergeError.notADocument(service: "(none)", reason: "there are no documents to merge") }
        var errors: [OpenAPIMergeError] = []

        let securities = sources.map { $0.document["security"] }
        let securityAgreed = securities.allSatisfy { $0 == securities[0] }

        var paths: [String: [String: JSONValue]] = [:]
        var pathOwners: [String: String] = [:]
        var operationOwners: [String: String] = [:]
        var operationIDs: [String: String] = [:]
        for source in sources {
            for path in source.paths.keys.sorted() {
                guard case .object(var item) = source.paths[path]! else {
                    errors.append(.notADocument(service: source.service, reason: "the path \(path) is not a mapping"))
                    continue
                }
                if sharedPaths.contains(path), paths[path] != nil { continue }
                if !securityAgreed, let security = source.document["security"] {
                    for method in item.keys where methods.contains(method) {
                        if case .object(var operation) = item[method]!, operation["security"] == nil {
                            operation["security"] = security
                            item[method] = .object(operation)
                        }
                    }
                }
                for method in item.keys.sorted() where methods.contains(method) {
                    guard case .string(let id)? = item[method]?["operationId"] else { continue }
                    if let owner = operationIDs[id] {
                        errors.append(.duplicateOperationID(id, services: [owner, source.service]))
                    } else {
                        operationIDs[id] = source.service
                    }
                }
                guard var merged = paths[path] else {
                    paths[path] = item
                    pathOwners[path] = source.service
                    for method in item.keys where methods.contains(method) { operationOwners["\(method) \(path)"] = source.service }
                    continue
                }
                if pathLevel(merged) != pathLevel(item) {
                    errors.append(.pathItemConflict(path: path, services: [pathOwners[path]!, source.service]))
                    continue
                }
                for method in item.keys.sorted() where methods.contains(method) {
                    if let owner = operationOwners["\(method) \(path)"] {
                        errors.append(.duplicateOperation(method: method, path: path, services: [owner, source.service]))
                    } else {
                        merged[method] = item[method]
                        operationOwners["\(method) \(path)"] = source.service
                    }
                }
                paths[path] = merged
            }
        }

        var components: [String: [String: JSONValue]] = [:]
        var componentOwners: [String: String] = [:]
        var webhooks: [String: JSONValue] = [:]
        var webhookOwners: [String: String] = [:]
        for source in sources {
            let kinds = source.document["components"]?.objectValue ?? [:]
            for kind in kinds.keys.sorted() {
                guard case .object(let entries) = kinds[kind]! else {
                    errors.append(.notADocument(service: source.service, reason: "components.\(kind) is not a mapping"))
                    continue
                }
                for name in entries.keys.sorted() {
                    let entry = entries[name]!
                    if let existing = components[kind]?[name] {
                        if existing != entry {
                            errors.append(.componentConflict(kind: kind, name: name, services: [componentOwners["\(kind)/\(name)"]!, source.service]))
                        }
                    } else {
                        components[kind, default: [:]][name] = entry
                        componentOwners["\(kind)/\(name)"] = source.service
                    }
                }
            }
            let hooks = source.document["webhooks"]?.objectValue ?? [:]
            for name in hooks.keys.sorted() {
                if let existing = webhooks[name] {
                    if existing != hooks[name]! { errors.append(.componentConflict(kind: "webhooks", name: name, services: [webhookOwners[name]!, source.service])) }
                } else {
                    webhooks[name] = hooks[name]!
                    webhookOwners[name] = source.service
                }
            }
        }

        var tags: [JSONValue] = []
        var tagNames: Set<String> = []
        for source in sources {
            guard case .array(let listed)? = source.document["tags"] else { continue }
            for tag in listed {
                guard case .string(let name)? = tag["name"] else { continue }
                if tagNames.insert(name).inserted { tags.append(tag) }
            }
        }

        if errors.count == 1 { throw errors[0] }
        if !errors.isEmpty { throw OpenAPIMergeError.several(errors) }

        let names = sources.map(\.service).joined(separator: ", ")
        var info: [String: JSONValue] = [
            "title": .string(title),
            "description": .string("The whole API in one document, merged from the OpenAPI documents of \(names)."),
        ]
        if let version = version ?? first.document["info"]?["version"]?.stringValue { info["version"] = .string(version) }
        var document: [String: JSONValue] = [
            "openapi": first.document["openapi"]!,
            "info": .object(info),
            "paths": .object(paths.mapValues { JSONValue.object($0) }),
        ]
        if !components.isEmpty { document["components"] = .object(components.mapValues { JSONValue.object($0) }) }
        if !webhooks.isEmpty { document["webhooks"] = .object(webhooks) }
        if !tags.isEmpty { document["tags"] = .array(tags) }
        if securityAgreed, let security = securities[0], security != .null { document["security"] = security }
        return .object(document)
    }

    /// A path item without its operations: what applies to all of them.
    static func pathLevel(_ item: [String: JSONValue]) -> [String: JSONValue] {
        item.filter { !methods.contains($0.key) }
    }
}

extension JSONValue {
    var objectValue: [String: JSONValue]? {
        if case .object(let object) = self { return object }
        return nil
    }

    var stringValue: String? {
        if case .string(let string) = self { return string }
        return nil
    }
}
