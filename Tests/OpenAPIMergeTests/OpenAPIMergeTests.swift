import Foundation
import Models
@testable import OpenAPIMerge
import Testing

/// The merge behind the gateway's `GET /openapi.json` and `docs/openapi.json` (`scripts/openapi`,
/// which runs it as the `OpenAPITool` executable).
@Suite struct OpenAPIMergeTests {
    static func source(_ service: String, _ yaml: String) throws -> OpenAPISource {
        try OpenAPISource(service: service, yaml: yaml)
    }

    static let gateway = """
        openapi: 3.1.0
        info: { title: gateway, version: 1.2.3 }
        paths:
          /healthz:
            get:
              responses: { "200": { description: ok, content: { application/json: { schema: { $ref: "#/components/schemas/Status" } } } } }
        components:
          schemas:
            Status: { type: object, properties: { status: { type: string } } }
            Problem: { type: object, required: [code], properties: { code: { type: string } } }
        """

    static let meals = """
        openapi: 3.1.0
        info: { title: meals, version: 0.1.0 }
        tags:
          - { name: meals, description: Meals. }
          - { name: shared, description: From meals. }
        paths:
          /healthz:
            get:
              summary: meals' own, never reached behind the gateway
              responses: { "200": { description: ok } }
          /v1/meals:
            get:
              operationId: listMeals
              tags: [meals]
              parameters: [{ $ref: "#/components/parameters/Limit" }]
              responses:
                "200": { description: ok }
                "400": { $ref: "#/components/responses/Problem" }
        components:
          schemas:
            Problem: { type: object, required: [code], properties: { code: { type: string } } }
          parameters:
            Limit: { name: limit, in: query, schema: { type: integer, minimum: 1, maximum: 100 } }
          responses:
            Problem: { description: An error., content: { application/problem+json: { schema: { $ref: "#/components/schemas/Problem" } } } }
        """

    static let profiles = """
        openapi: 3.1.0
        info: { title: profiles, version: 0.2.0 }
        tags:
          - { name: shared, description: "From profiles, and dropped." }
          - { name: profiles }
        paths:
          /healthz:
            get:
              responses: { "200": { description: ok } }
          /v1/profiles:
            get:
              operationId: listProfiles
              tags: [profiles]
              parameters: [{ $ref: "#/components/parameters/Limit" }]
              responses: { "200": { description: ok }, "400": { $ref: "#/components/responses/Problem" } }
        components:
          schemas:
            Problem:
              type: object
              required: [code]
              properties:
                code: { type: string }
          parameters:
            Limit: { name: limit, in: query, schema: { type: integer, minimum: 1, maximum: 100 } }
          responses:
            Problem: { description: An error., content: { application/problem+json: { schema: { $ref: "#/components/schemas/Problem" } } } }
        """

    @Test func identicalComponentsAreOneAndTagsAndPathsAreUnions() throws {
        let merged = try OpenAPIMerge.merge([Self.source("gateway", Self.gateway), Self.source("meals", Self.meals), Self.source("profiles", Self.profiles)])
        #expect(merged["openapi"] == .string("3.1.0"))
        #expect(merged["info"]?["title"] == .string("Food backend API") && merged["info"]?["version"] == .string("1.2.3"))
        #expect(merged["info"]?["description"]?.stringValue?.contains("gateway, meals, profiles") == true)
        #expect(merged["servers"] == nil && merged["security"] == nil)
        #expect(Set(merged["paths"]?.objectValue?.keys.map { $0 } ?? []) == ["/healthz", "/v1/meals", "/v1/profiles"])
        // /healthz is the gateway's: every process serves one, and behind the gateway only its own responses.
        #expect(merged["paths"]?["/healthz"]?["get"]?["summary"] == nil)
        // The components the documents share are there once, written the same however the YAML was.
        #expect(merged["components"]?["schemas"]?.objectValue?.keys.sorted() == ["Problem", "Status"])
        #expect(merged["components"]?["parameters"]?.objectValue?.keys.sorted() == ["Limit"])
        #expect(merged["components"]?["responses"]?.objectValue?.keys.sorted() == ["Problem"])
        // Tags by name, in the order first met, the first description winning.
        var tags: [JSONValue] = []
        if case .array(let listed)? = merged["tags"] { tags = listed }
        #expect(tags.compactMap { $0["name"]?.stringValue } == ["meals", "shared", "profiles"])
        #expect(tags.count == 3 && tags[1]["description"] == .string("From meals."))
        // The version can be given.
        let versioned = try OpenAPIMerge.merge([Self.source("meals", Self.meals)], version: "9.0.0")
        #expect(versioned["info"]?["version"] == .string("9.0.0"))
    }

    @Test func aDifferentComponentOfOneNameIsAnErrorNamingBothServices() throws {
        let other = Self.profiles.replacingOccurrences(of: "code: { type: string }", with: "code: { type: integer }")
        #expect(throws: OpenAPIMergeError.componentConflict(kind: "schemas", name: "Problem", services: ["meals", "profiles"])) {
            try OpenAPIMerge.merge([Self.source("meals", Self.meals), Self.source("profiles", other)])
        }
        let error = OpenAPIMergeError.componentConflict(kind: "schemas", name: "Problem", services: ["meals", "profiles"])
        #expect(error.description.contains("components.schemas.Problem") && error.description.contains("meals and profiles"))
    }

    @Test func aDuplicateOperationIDIsAnError() throws {
        let other = Self.profiles.replacingOccurrences(of: "operationId: listProfiles", with: "operationId: listMeals")
        #expect(throws: OpenAPIMergeError.duplicateOperationID("listMeals", services: ["meals", "profiles"])) {
            try OpenAPIMerge.merge([Self.source("meals", Self.meals), Self.source("profiles", other)])
        }
    }

    @Test func theSameOperationInTwoDocumentsIsAnErrorAndOtherMethodsOfOnePathMerge() throws {
        let same = Self.profiles.replacingOccurrences(of: "/v1/profiles:", with: "/v1/meals:").replacingOccurrences(of: "operationId: listProfiles", with: "operationId: other")
        #expect(throws: OpenAPIMergeError.duplicateOperation(method: "get", path: "/v1/meals", services: ["meals", "profiles"])) {
            try OpenAPIMerge.merge([Self.source("meals", Self.meals), Self.source("profiles", same)])
        }
        #expect(OpenAPIMergeError.duplicateOperation(method: "get", path: "/v1/meals", services: ["meals", "profiles"]).description == "GET /v1/meals is in both meals and profiles")

        // Another method on the same path is the union of the two.
        let post = same.replacingOccurrences(of: "    get:\n      operationId: other", with: "    post:\n      operationId: other")
        let merged = try OpenAPIMerge.merge([Self.source("meals", Self.meals), Self.source("profiles", post)])
        #expect(merged["paths"]?["/v1/meals"]?.objectValue?.keys.sorted() == ["get", "post"])

        // Unless the path's own fields differ: they would apply to the other's operations too.
        let withParameters = post.replacingOccurrences(of: "  /v1/meals:\n", with: "  /v1/meals:\n    parameters: [{ name: x, in: query, schema: { type: string } }]\n")
        #expect(throws: OpenAPIMergeError.pathItemConflict(path: "/v1/meals", services: ["meals", "profiles"])) {
            try OpenAPIMerge.merge([Self.source("meals", Self.meals), Self.source("profiles", withParameters)])
        }
    }

    @Test func everyConflictIsReportedAtOnce() throws {
        let other = Self.profiles.replacingOccurrences(of: "code: { type: string }", with: "code: { type: integer }")
            .replacingOccurrences(of: "operationId: listProfiles", with: "operationId: listMeals")
        #expect(
            throws: OpenAPIMergeError.several([
                .duplicateOperationID("listMeals", services: ["meals", "profiles"]),
                .componentConflict(kind: "schemas", name: "Problem", services: ["meals", "profiles"]),
            ])
        ) {
            try OpenAPIMerge.merge([Self.source("meals", Self.meals), Self.source("profiles", other)])
        }
    }

    @Test func rootSecurityStaysWhereTheDocumentsAgree() throws {
        let secured = { (yaml: String) in yaml.replacingOccurrences(of: "paths:\n", with: "security: [{ bearer: [] }]\npaths:\n") }
        let agreed = try OpenAPIMerge.merge([Self.source("meals", secured(Self.meals)), Self.source("profiles", secured(Self.profiles))])
        #expect(agreed["security"] == .array([.object(["bearer": .array([])])]))
        #expect(agreed["paths"]?["/v1/meals"]?["get"]?["security"] == nil)

        // One document's default goes onto its own operations.
        let mixed = try OpenAPIMerge.merge([Self.source("meals", secured(Self.meals)), Self.source("profiles", Self.profiles)])
        #expect(mixed["security"] == nil)
        #expect(mixed["paths"]?["/v1/meals"]?["get"]?["security"] == .array([.object(["bearer": .array([])])]))
        #expect(mixed["paths"]?["/v1/profiles"]?["get"]?["security"] == nil)
    }

    @Test func whatIsNotAnOpenAPI3DocumentIsNamed() throws {
        #expect(throws: OpenAPIMergeError.notADocument(service: "echo", reason: "its `openapi` field does not say 3.x")) {
            try Self.source("echo", #"{"service": "auth", "path": "/openapi.yaml"}"#)
        }
        #expect(throws: OpenAPIMergeError.self) { try Self.source("broken", "openapi: [3.1.0\npaths: {") }
    }

    /// YAML 1.1's scalars: quoted ones are strings, timestamps stay text, keys are as written.
    @Test func yamlScalarsReadAsYAML11() throws {
        let value = try OpenAPIYAML.parse(
            """
            quoted: "1"
            int: 1
            float: 1.5
            bool: true
            quotedBool: "true"
            date: 2026-01-01
            nothing: ~
            200: x
            list: [x, 'y']
            """)
        #expect(
            value
                == .object([
                    "quoted": .string("1"), "int": .number(1), "float": .number(1.5), "bool": .bool(true), "quotedBool": .string("true"),
                    "date": .string("2026-01-01"), "nothing": .null, "200": .string("x"), "list": .array([.string("x"), .string("y")]),
                ]))
    }

    /// Sorted keys, compact for the gateway's answer (the API's own writer) and indented for
    /// docs/openapi.json; strings with brackets, commas and colons in them are left as they are.
    @Test func jsonHasSortedKeysAndOneForm() throws {
        let value: JSONValue = .object([
            "b": .array([.number(1), .number(1.5)]), "a": .object([:]), "c": .string("é\"\n\u{1}"), "B": .null, "d": .array([]),
            "e": .object(["{[,:]}": .string(#"\",{x: [1]}"#)]),
        ])
        #expect(try OpenAPIJSON.string(value) == #"{"B":null,"a":{},"b":[1,1.5],"c":"é\"\n\u0001","d":[],"e":{"{[,:]}":"\\\",{x: [1]}"}}"#)
        #expect(
            try OpenAPIJSON.string(value, pretty: true)
                == "{\n  \"B\": null,\n  \"a\": {},\n  \"b\": [\n    1,\n    1.5\n  ],\n  \"c\": \"é\\\"\\n\\u0001\",\n  \"d\": [],\n  \"e\": {\n    \"{[,:]}\": \"\\\\\\\",{x: [1]}\"\n  }\n}")
        #expect(try OpenAPIJSON.snapshot(value) == OpenAPIJSON.encode(value, pretty: true) + Array("\n".utf8))
    }

    /// The repository's own documents merge, each path once (a shared path, `/healthz`, counted once).
    @Test func theRepositorysDocumentsMerge() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let services = root.appendingPathComponent("Services")
        let folders = try FileManager.default.contentsOfDirectory(atPath: services.path)
            .filter { FileManager.default.fileExists(atPath: services.appendingPathComponent("\($0)/openapi.yaml").path) }.sorted()
        #expect(folders.contains("Gateway") && folders.count >= 6, "\(folders)")
        // In the gateway's order: its own first, then the services by name.
        let sources = try OpenAPISource.repository(services: services)
        #expect(sources.map(\.service) == ["gateway"] + folders.filter { $0 != "Gateway" }.map { $0.lowercased() })
        let merged = try OpenAPIMerge.merge(sources)
        let paths = try #require(merged["paths"]?.objectValue)
        let repeats = OpenAPIMerge.defaultSharedPaths.map { path in max(0, sources.filter { $0.paths[path] != nil }.count - 1) }.reduce(0, +)
        #expect(paths.count == sources.map(\.paths.count).reduce(0, +) - repeats)
        func operations(_ items: [String: JSONValue]) -> Int {
            items.values.map { ($0.objectValue ?? [:]).keys.filter { OpenAPIMerge.methods.contains($0) }.count }.reduce(0, +)
        }
        let repeatedOperations = OpenAPIMerge.defaultSharedPaths.map { path in
            sources.compactMap { $0.paths[path]?.objectValue }.dropFirst().map { operations(["": .object($0)]) }.reduce(0, +)
        }.reduce(0, +)
        #expect(operations(paths) == sources.map { operations($0.paths) }.reduce(0, +) - repeatedOperations)
        #expect(merged["components"]?["schemas"]?["Problem"] != nil)
        // The same bytes every time: what the gateway caches and answers.
        let again = try OpenAPIMerge.merge(sources)
        #expect(try OpenAPIJSON.encode(again) == OpenAPIJSON.encode(merged))
    }
}
