import ServiceKit

@main
enum EntitlementsMain {
    static func main() async {
        await ServiceLauncher.main(EntitlementsService.definition)
    }
}
