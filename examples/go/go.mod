module baton.example/lockrun

go 1.19
